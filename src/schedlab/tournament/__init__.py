"""The cross-paper tournament: every policy of the four papers on every workload they share a
meaning on, on one calibrated engine per modality, scored on one table."""
