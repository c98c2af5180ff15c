"""schedlab: request scheduling for LLM and speech-recognition serving, reproduced and compared."""

__version__ = "0.1.0"
