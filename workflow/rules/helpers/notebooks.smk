# The notebooks: their names, outputs and declared inputs (each study's rule file sets its
# notebook's), and the figure map their figures' report labels come from.


NOTEBOOKS = ("calibration", "asr_duration", "slosa", "ewsjf", "slai", "tournament", "asr_extensions")


def notebook_outputs(name):
    return [f"{RESULTS}/notebooks/{name}.ipynb", f"{RESULTS}/notebooks/{name}.html"]


#: Every figure a notebook saves, with its caption (workflow/report/figure_map.yaml).
FIGURE_MAP = figure_map.figures(os.path.join(workflow.basedir, "workflow", "report", "figure_map.yaml"))


def figure_labels(wildcards):
    """A figure's labels in the report: its name, and what it shows (the figure map)."""
    return {"figure": wildcards.figure, "shows": figure_map.label(FIGURE_MAP, wildcards.name, wildcards.figure)}


# -- Notebooks (notebooks.smk) -------------------------------------------------------------------
#: Each notebook's declared inputs: name -> function of no arguments, set by the rule file of
#: the study it shows.
NOTEBOOK_INPUTS = {}


def notebook_inputs(name):
    return NOTEBOOK_INPUTS[name]()


def asr_notebook_common():
    """What paper A's notebooks and the calibration notebook all read."""
    return {
        "utterances": rules.librispeech.output[0],
        "kappa": rules.kappa.output[0],
        "calibration": f"{RESULTS}/fit/calibration/{ASR['hardware']}.json",
    }
