"""Two "machines" on one host, for the deployment runtime (`redkit federate --runtime deployment --netns`): the
owners' SuperNodes (and the ClientApps they start) in a network namespace of their own, joined to the server's by
a virtual Ethernet pair, so that every byte between an owner and the SuperLink crosses a network link instead of
the loopback device, and an owner's processes cannot reach anything of the server's but the address it is given.

    server (this host's namespace)  10.77.0.1 ── veth ── 10.77.0.2  owners (namespace "redkit-owners")
      flower-superlink --host 10.77.0.1, flwr run              flower-supernode --superlink 10.77.0.1:PORT, ...

Linux only, and root (or CAP_NET_ADMIN) only: `ip netns` and `ip link` make them; `down` removes both (deleting
the namespace deletes its end of the pair, and with it the pair). Traffic stays inside this host.
"""

import subprocess
from dataclasses import dataclass

from redkit.errors import RedkitError


@dataclass(frozen=True)
class OwnersNetwork:
    namespace: str = "redkit-owners"
    server_ip: str = "10.77.0.1"  # the host's end: where the SuperLink listens
    owners_ip: str = "10.77.0.2"  # the owners' end
    prefix: int = 30
    link: str = "rk-server"  # the host's end of the pair (interface names: at most 15 characters)
    peer: str = "rk-owners"

    def up(self) -> None:
        """Make the namespace and the link (an earlier run's, left by a crash, removed first)."""
        self.down()
        steps = [
            ["ip", "netns", "add", self.namespace],
            ["ip", "link", "add", self.link, "type", "veth", "peer", "name", self.peer],
            ["ip", "link", "set", self.peer, "netns", self.namespace],
            ["ip", "addr", "add", f"{self.server_ip}/{self.prefix}", "dev", self.link],
            ["ip", "link", "set", self.link, "up"],
            *(
                self.inside(step)
                for step in (
                    ["ip", "addr", "add", f"{self.owners_ip}/{self.prefix}", "dev", self.peer],
                    ["ip", "link", "set", self.peer, "up"],
                    ["ip", "link", "set", "lo", "up"],  # each SuperNode's own ClientApp port is on its loopback
                )
            ),
        ]
        for step in steps:
            done = subprocess.run(step, capture_output=True, text=True)
            if done.returncode:
                self.down()
                why = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
                raise RedkitError(f"--netns: `{' '.join(step)}` failed ({why[0]}); it needs Linux and root")

    def down(self) -> None:
        subprocess.run(["ip", "netns", "del", self.namespace], capture_output=True)
        subprocess.run(["ip", "link", "del", self.link], capture_output=True)

    def inside(self, args: list[str]) -> list[str]:
        """`args` run in the owners' namespace (`ip netns exec` execs it: the same process, pid and group)."""
        return ["ip", "netns", "exec", self.namespace, *args]
