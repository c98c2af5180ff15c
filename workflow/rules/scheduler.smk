# Snakemake's scheduler keeps one pending wake-up: its rate limiter's timers otherwise pile up,
# one more for each job that ends while others wait for cores, and wake it many times a second
# beside a job whose timing is the measurement (schedlab.compat.snakemake).
from schedlab.compat.snakemake import one_pending_wakeup

one_pending_wakeup()
