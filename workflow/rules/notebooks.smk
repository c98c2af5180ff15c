# Notebooks: the rule's declared inputs go into a manifest (`<results>/notebooks/<name>.inputs.json`);
# the jupytext source (notebooks/*.py) is converted, executed by papermill with the manifest as
# its parameter, and exported to HTML. Figures go to results/figures/<name>/.


localrules:
    notebook_manifest,


rule notebook_manifest:
    output:
        f"{RESULTS}/notebooks/{{name}}.inputs.json",
    log:
        f"{RESULTS}/logs/notebooks/{{name}}.inputs.log",
    wildcard_constraints:
        name="|".join(NOTEBOOKS),
    params:
        inputs=lambda w: notebook_inputs(w.name),
        backend=config["backend"],
        hardware=ASR["hardware"],
    run:
        write_manifest(output[0], log[0], params.inputs, backend=params.backend, hardware=params.hardware)


rule notebook:
    input:
        unpack(lambda w: {"source": f"notebooks/{w.name}.py", **notebook_inputs(w.name)}),
        manifest=rules.notebook_manifest.output[0],
    output:
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
        tmp=lambda w, output: os.path.join(os.path.dirname(output.ipynb), f".{w.name}.source.ipynb"),
    shell:
        "(jupytext --to ipynb --set-kernel python3 -o {params.tmp} {input.source}"
        " && papermill {params.tmp} {output.ipynb} -k python3 --no-progress-bar"
        " -p manifest {input.manifest} -p figures_dir {output.figures}"
        " && jupyter nbconvert --to html --output-dir $(dirname {output.html}) {output.ipynb}"
        " && rm -f {params.tmp}) > {log} 2>&1"
