# schedlab pipeline: data -> profile -> fit -> workloads -> runs -> notebooks.
# Run with `snakemake --cores all` (or `make reproduce`); the figure map is workflow/report/figure_map.yaml.
# Before any job: the config checked as `schedlab check-config` checks it (schedlab.validation.config:
# one line, exit 2), and the lock of a run that was killed released when no other Snakemake works
# here (schedlab.compat.snakemake).
from schedlab.compat.snakemake import release_stale_lock
from schedlab.errors import SchedlabError
from schedlab.snakemake_start import config_error
from schedlab.validation.config import check_config


configfile: "config.yaml"


report: "workflow/report/workflow.rst"


try:
    check_config(config)
except SchedlabError as e:
    config_error(e)
release_stale_lock(workflow)


include: "workflow/rules/scheduler.smk"
include: "workflow/rules/common.smk"
include: "workflow/rules/helpers/flags.smk"
include: "workflow/rules/helpers/sweeps.smk"
include: "workflow/rules/helpers/notebooks.smk"
include: "workflow/rules/helpers/run.smk"
include: "workflow/rules/helpers/fit.smk"
include: "workflow/rules/helpers/slosa.smk"
include: "workflow/rules/helpers/ewsjf.smk"
include: "workflow/rules/helpers/slai.smk"
include: "workflow/rules/helpers/extensions.smk"
include: "workflow/rules/helpers/tournament.smk"
include: "workflow/rules/helpers/measured.smk"
include: "workflow/rules/helpers/transformers.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/profile.smk"
include: "workflow/rules/fit.smk"
include: "workflow/rules/run.smk"
include: "workflow/rules/slosa.smk"
include: "workflow/rules/ewsjf.smk"
include: "workflow/rules/slai.smk"
include: "workflow/rules/extensions.smk"
include: "workflow/rules/tournament.smk"
include: "workflow/rules/measured.smk"
include: "workflow/rules/transformers.smk"
include: "workflow/rules/notebooks.smk"


rule all:
    input:
        notebook_outputs("calibration"),
        notebook_outputs("asr_duration"),
        notebook_outputs("slosa"),
        notebook_outputs("ewsjf"),
        notebook_outputs("slai"),
        notebook_outputs("tournament"),
        notebook_outputs("asr_extensions"),
        rules.results_page.output,
