"""The fit stage: kappa per language, step-time regressions, calibration."""
