"""The paper's experiments and studies, as a plug-in of the redkit library.

    arithmetic   Task 1 / Task 2: generated arithmetic questions, their runs, `redkit data`, `reproduce task1|task2`
    steps        decomposed execution (operation experts, the executor, add-expert); decomposer: the step decomposer
    digits       the handwritten-digits benchmark; toy: toy experiments A/B/C
    peers        LoRA experts inside the backbone beside peft's Arrow, merges and X-LoRA
    routing      the routing-quality protocol's routing analysis: metrics, monitors, token-level routers; spectra: a tiny Mixtral
    study        noise, ablation, seeds, complexity, levers, tuning, lifecycle

redkit finds it through the entry points of pyproject.toml (redkit/plugins.py): importing
redkit_experiments.plugin registers the tasks and run kinds (task1, task2, steps, digits) in redkit's
registries; importing redkit_experiments.cli registers the commands. The library never imports it.
"""
