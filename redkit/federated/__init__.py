"""Owners who never share their data: a RED model assembled from what each owner trained where its data lives
(`redkit federate`, redkit/federated/flower_app.py over Flower), beside federated averaging (fedavg.py).

    plan.py       what the server sends every owner: the backbone (by fingerprint), the seed, the routing's φ
    owner.py      one owner's contribution, computed from its own data alone: module files and their manifest
    upload.py     a contribution as one tar, uploaded to a running `redkit serve` (POST /v1/domains?owner=NAME)
    assemble.py   the server's checks of a contribution, and the run it assembles from the accepted ones
    fedavg.py     the reference: the joint fine-tune each owner trains E local epochs a round (FedProx's term)
    strategies.py Flower's FedAvg, FedProx and FedAdam on the server: metered, resumed, stopped by the owners' val
    flower_app.py the Flower ServerApp and ClientApp that carry both
    deployment.py Flower's deployment runtime on this machine: a SuperLink, one SuperNode per owner, `flwr run`
    federate.py   `redkit federate`: both methods over the same owners, the one-machine recipe, results.json
"""
