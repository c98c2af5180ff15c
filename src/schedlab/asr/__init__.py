"""Paper A: scheduling Whisper's requests by audio duration (FCFS, SJF and HRRN, ordered by the
expected output length ``n_hat`` from a clip's duration and kappa). Its policies are schedlab's
generic ones (:mod:`schedlab.policies`); this package holds the paper's own tables
(:mod:`.report`); its notebook is ``notebooks/asr_duration.py``."""
