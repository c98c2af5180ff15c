"""schedlab: request scheduling for LLM and speech-recognition serving, reproduced and compared."""

from schedlab.numba_cache import use_writable_cache

__version__ = "0.1.0"

# Before any module compiles a kernel: a cache numba can write (another user's install).
use_writable_cache()
