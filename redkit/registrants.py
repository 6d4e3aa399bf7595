"""The library's own packages that fill its registries, in the order their entries are listed: the
expert kinds (redkit.red), the router zoo (redkit.routers), the references and their stages
(redkit.references), the owners' out-of-scope densities (redkit.oos), the run kind of your labelled text (redkit.fitting.run). Loaded at the top
through the entry point `redkit.plugins` (redkit/plugins.py), before any plug-in's."""

from redkit import (
    references,  # noqa: F401
    routers,  # noqa: F401
)
from redkit.fitting import run  # noqa: F401
from redkit.oos import owner_density  # noqa: F401
from redkit.red import layer  # noqa: F401
