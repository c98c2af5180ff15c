# Notebooks, one process each (workflow/scripts/render_notebook.py): the rule's declared inputs go
# into a manifest (`<results>/notebooks/<name>.inputs.json`); the jupytext source (notebooks/*.py)
# is executed by papermill with the manifest as its parameter and exported to HTML. Figures go to
# results/figures/<name>/.


rule notebook:
    input:
        unpack(lambda w: {"source": f"notebooks/{w.name}.py", **notebook_inputs(w.name)}),
    output:
        manifest=f"{RESULTS}/notebooks/{{name}}.inputs.json",
        ipynb=f"{RESULTS}/notebooks/{{name}}.ipynb",
        html=report(
            f"{RESULTS}/notebooks/{{name}}.html",
            caption="../report/notebook.rst",
            category="{name}",
            labels={"figure": "executed notebook", "shows": "tables and figures"},
        ),
        figures=report(
            directory(f"{RESULTS}/figures/{{name}}"),
            patterns=["{figure}.png"],
            caption="../report/figure.rst",
            category="{name}",
            labels=figure_labels,
        ),
    log:
        f"{RESULTS}/logs/notebooks/{{name}}.log",
    wildcard_constraints:
        name="|".join(NOTEBOOKS),
    conda:
        SIM_ENV
    params:
        settings={
            "backend": config["backend"],
            "hardware": ASR["hardware"],
            # The hardware and model of papers C and D, whose calibrated factors the
            # calibration notebook holds against the GPU profiles.
            "papers": {
                "C": {k: SLAI[k] for k in ("hardware", "model")},
                "D": {k: SLOSA[k] for k in ("hardware", "model")},
            },
        },
    script:
        "../scripts/render_notebook.py"
