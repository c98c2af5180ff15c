"""A real engine's steps: the log its scheduler writes, and the tables read from it."""
