"""Public workload data: download or offline mirror, parsed into utterance tables."""
