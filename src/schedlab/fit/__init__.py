"""The fit stage: kappa per language, step-time regressions, calibration; the profiles
measured on real GPUs and shipped with the package (:mod:`.shipped`), what their passes achieve
against the roofline (:mod:`.efficiency`) and the step costs fitted from them for any catalogue
GPU (:mod:`.measured`)."""
