"""transformers' continuous batching with schedlab's queue policies: the scheduler class, its
real engine (the ``transformers`` backend), its scheduler on a virtual clock
(``transformers-sim``) and the held-out study."""
