"""`redkit reproduce spectra`: the routing-quality protocol's routers at token level, inside a tiny Mixtral trained from
scratch on code / math / prose, with the routing-quality protocol's tables filled from measurements.

    corpus      the three domains (stdlib sources, Task 2 text, CLINC150 queries), bytes, held-out text
    model       the tiny Mixtral config and the router variants (baselines, SPECTRA ablations)
    train       one variant's training loop with a RoutingMonitor on a fixed probe
    measure     held-out loss per domain, routing metrics per layer, specialisation, Gram, collapse
    overhead    Table 9: SPECTRA's components timed inside one MoE block
    experiment  variants x seeds (+ router replacement, E-sweep), one results.json per seed
    tables      the routing-quality protocol's tables over seeds and the verdict per hypothesis (paired t-tests)
    figures     dynamics, usage over training, loss curves, affinity heatmaps
    report      report.md and report.html

Depends on the spine and on redkit_experiments.routing (token routers, metrics); nothing depends on it.
"""
