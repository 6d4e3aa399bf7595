"""What the federation's server and owners are told (`Settings`): the simulation runtime builds its apps around one
(flower_app.apps), the deployment runtime carries it as JSON in the run config (key "settings")."""

import json
from dataclasses import asdict, dataclass, field

from flwr.app import Context

from redkit.federated.upload import SIZE_LIMIT


@dataclass
class Settings:
    plan: str  # FederationPlan as JSON
    run_dir: str  # RUN, on the server
    owners: int  # how many owners the server waits for
    rounds: int = 10  # the iterative baseline's, at most; 0: RED only
    iterative: dict = field(default_factory=dict)  # the iterative baseline (strategies.IterativeConfig's fields)
    red: bool = True  # RED's round (off: the iterative baseline alone, e.g. a grid of its settings)
    labels: list[str] = field(default_factory=list)  # FedAvg's output layer (agreed label names)
    test: str = ""  # the experimenter's test file, for FedAvg's accuracy after every round ("": none)
    owner_names: list[str] = field(default_factory=list)  # simulation: partition i's owner name
    owner_dirs: list[str] = field(default_factory=list)  # simulation: partition i's data directory
    owner_work: str = ""  # simulation: where owner i keeps its work (OWNER_WORK/<owner>)
    timeout: float = 3600.0  # seconds the server waits for every owner to connect
    round_timeout: float = 600.0  # seconds a round (RED's, each of FedAvg's) waits for replies; the late left out
    size_limit: int = SIZE_LIMIT  # bytes a contribution may have
    drill: dict[str, int] = field(default_factory=dict)  # {owner: FedAvg round}: its app fails in that round
    registered: dict[str, str] = field(default_factory=dict)  # {node id: owner} whose key it was registered with

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_context(cls, context: Context) -> "Settings":
        return cls(**json.loads(context.run_config["settings"]))
