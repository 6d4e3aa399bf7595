"""The modular life cycle of a fit run: a domain added (with labels the run has never seen), a
domain removed, an expert trained elsewhere from a bundle and plugged in; each writes a new run
and leaves every module it copies byte-identical (checked by sha256).

    new_labels.py  a new domain's label rows, trained alone with its residual expert through frozen C
    derive.py      what add and remove share: the new run, its data and features, the copied modules, the check
    add.py         `redkit add-domain --run RUN --data NEWDIR | --expert EXPERT`
    remove.py      `redkit remove-domain --run RUN --domain NAME`
    expert.py      `redkit train-expert --bundle BUNDLE --data NEWDIR --out EXPERT`: a self-describing expert
    study.py       `redkit study lifecycle --run RUN`: add and remove each domain, against retraining
"""
