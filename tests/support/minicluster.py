"""A real three-node Slurm cluster on one Linux machine, for integration tests and demos.

munged, slurmctld and three slurmd (``node1``..``node3``) run inside one private pid + mount namespace so that
a private ``/etc/hosts`` can name the nodes and one ``kill -KILL`` of the namespace holder ends every daemon
and every job step. Each slurmd gets its own UTS namespace (its own hostname), which torchrun's c10d
rendezvous needs to decide which node hosts the store. Accounting is real too: a private MariaDB and
``slurmdbd`` in the same namespace, so ``sacct`` answers. Needs root, Debian's ``slurm-wlm`` (built with
multiple-slurmd support), ``munge``, ``slurmdbd`` and ``mariadb-server``. Clients only need ``SLURM_CONF``
(see :meth:`MiniCluster.env`).

    PYTHONPATH=tests python -m support.minicluster DIR     # start, print the SLURM_CONF line, run until Ctrl-C
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from .ports import free_ports

# Three nodes: a two-node job can lose one (hang, failed health check) and restart on the other two.
NODES = {"node1": "127.0.1.1", "node2": "127.0.1.2", "node3": "127.0.1.3"}
REQUIRED = ("munged", "slurmctld", "slurmd", "slurmdbd", "mariadbd", "mariadb-install-db", "sacctmgr", "unshare",
            "setsid", "sinfo", "scontrol")

_SUPERVISOR = """\
#!/bin/bash
# pid 1 of the cluster's namespace: private /etc/hosts, then the daemons; ends when the namespace is killed.
set -eu
cd "$MINI_DIR"
mount --bind "$MINI_DIR/hosts" /etc/hosts
if [ -n "${MINI_HYPERPOD:-}" ]; then
  # A SageMaker HyperPod-like node: /opt/sagemaker_cluster exists inside this namespace only. /opt is replaced by a
  # directory of links to the real /opt's entries plus the marker; the real /opt is never touched.
  mkdir -p "$MINI_DIR/opt/sagemaker_cluster"
  for entry in /opt/*; do [ -e "$entry" ] && ln -sfn "$entry" "$MINI_DIR/opt/${entry##*/}"; done
  mount --bind "$MINI_DIR/opt" /opt
fi
munged --force --socket="$MINI_DIR/munge/munged.sock" --key-file="$MINI_DIR/munge/munge.key" \\
  --pid-file="$MINI_DIR/munge/munged.pid" --log-file="$MINI_DIR/log/munged.log" \\
  --seed-file="$MINI_DIR/munge/munged.seed"
# Accounting: MariaDB (own datadir, loopback port, no grant tables: nothing but slurmdbd can reach it) and
# slurmdbd, which finds slurmdbd.conf beside $SLURM_CONF; the cluster is registered before slurmctld starts.
wait_port() {  # wait_port PORT WHAT: up to 60 s for a listener, else fail with the daemon's log
  for _ in $(seq 600); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.1; done
  echo "$2 did not listen on $1" >&2; return 1
}
mariadbd --no-defaults --datadir="$MINI_DIR/db" --socket="$MINI_DIR/run/mysqld.sock" \
  --pid-file="$MINI_DIR/run/mysqld.pid" --bind-address=127.0.0.1 --port="$MINI_DB_PORT" --user=root \
  --skip-grant-tables --log-error="$MINI_DIR/log/mariadb.log" &
wait_port "$MINI_DB_PORT" mariadbd
SLURM_CONF="$MINI_DIR/slurm.conf" slurmdbd -D >>"$MINI_DIR/log/slurmdbd.out" 2>&1 &
wait_port "$MINI_DBD_PORT" slurmdbd
SLURM_CONF="$MINI_DIR/slurm.conf" sacctmgr -i add cluster "$MINI_CLUSTER" >>"$MINI_DIR/log/sacctmgr.out" 2>&1
slurmctld -D -f "$MINI_DIR/slurm.conf" >>"$MINI_DIR/log/slurmctld.out" 2>&1 &
for node in $MINI_NODES; do
  unshare --uts bash -c 'hostname "$1" && exec slurmd -D -N "$1" -f "$2"' slurmd-"$node" "$node" \\
    "$MINI_DIR/slurm.conf" >>"$MINI_DIR/log/slurmd-$node.out" 2>&1 &
done
wait
"""


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the starting process dies (a killed pytest leaves no cluster)."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


CLUSTER = "mtkmini"


def slurmdbd_conf(root: Path, dbd_port: int, db_port: int) -> str:
    """slurmdbd.conf: the accounting daemon on loopback, storing into the cluster's own MariaDB."""
    return "\n".join([
        "AuthType=auth/munge",
        f"AuthInfo=socket={root}/munge/munged.sock",
        "DbdHost=localhost",
        "DbdAddr=127.0.0.1",
        f"DbdPort={dbd_port}",
        "SlurmUser=root",
        f"PidFile={root}/run/slurmdbd.pid",
        f"LogFile={root}/log/slurmdbd.log",
        "StorageType=accounting_storage/mysql",
        "StorageHost=127.0.0.1",
        f"StoragePort={db_port}",
        "StorageUser=root",
        "StorageLoc=slurm_acct_db",
    ]) + "\n"


def slurm_conf(root: Path, ctld_port: int, node_ports: dict[str, int], cpus: int = 2, dbd_port: int = 0,
               gpus: int = 0) -> str:
    """A slurm.conf for the namespaced cluster: accounting through slurmdbd (so ``sacct`` works), no cgroups,
    fast scheduling for tests."""
    lines = [
        f"ClusterName={CLUSTER}",
        "SlurmctldHost=localhost(127.0.0.1)",
        f"SlurmctldPort={ctld_port}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        # cred_expire: a requeued job may start again only after it (Slurm revokes the old credential for that
        # long); 5 s is the least Slurm accepts (default 120) and each requeue in the suite waits it out.
        f"AuthInfo=socket={root}/munge/munged.sock,cred_expire=5",
        f"StateSaveLocation={root}/state",
        f"SlurmdSpoolDir={root}/spool/%n",
        f"SlurmctldPidFile={root}/run/slurmctld.pid",
        f"SlurmdPidFile={root}/run/slurmd-%n.pid",
        f"SlurmctldLogFile={root}/log/slurmctld.log",
        f"SlurmdLogFile={root}/log/slurmd-%n.log",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/slurmdbd",
        "AccountingStorageHost=127.0.0.1",
        f"AccountingStoragePort={dbd_port}",
        f"AccountingStoragePass={root}/munge/munged.sock",
        "JobCompType=jobcomp/none",
        "SchedulerParameters=sched_interval=1,bf_interval=1",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "MpiDefault=none",
        "ReturnToService=2",
        "KillWait=5",
        "MinJobAge=600",
        "InactiveLimit=0",
        "SlurmdTimeout=60",
    ]
    if gpus:  # count-only GPU GRES (gres.conf beside slurm.conf): Slurm schedules them, no device is behind them
        lines.append("GresTypes=gpu")
    for name, addr in NODES.items():
        lines.append(f"NodeName={name} NodeHostname={name} NodeAddr={addr} Port={node_ports[name]} "
                     f"CPUs={cpus} RealMemory=2000 State=UNKNOWN" + (f" Gres=gpu:{gpus}" if gpus else ""))
    lines.append(f"PartitionName=debug Nodes={','.join(NODES)} Default=YES MaxTime=INFINITE State=UP")
    return "\n".join(lines) + "\n"


@dataclass
class MiniCluster:
    """Start with :meth:`start`, stop with :meth:`stop` (idempotent). ``root`` holds config, state and logs."""

    root: Path
    cpus_per_node: int = 2
    hyperpod: bool = False  # /opt/sagemaker_cluster exists for the daemons and jobs (the namespace's own /opt)
    gpus: int = 0  # GPU GRES per node (count only), as on a ParallelCluster GPU partition
    proc: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """Environment for Slurm clients (sbatch, squeue, ...) talking to this cluster."""
        env = dict(os.environ if base is None else base)
        env["SLURM_CONF"] = str(self.conf)
        return env

    def start(self, timeout: float = 30.0) -> MiniCluster:
        missing = [tool for tool in REQUIRED if shutil.which(tool) is None]
        if missing:
            raise RuntimeError(f"cannot start the Slurm test cluster: {', '.join(missing)} not found; "
                               "install the Debian packages slurm-wlm, munge, slurmdbd and mariadb-server")
        if os.geteuid() != 0:
            raise RuntimeError("the Slurm test cluster needs root (namespaces, bind-mounted /etc/hosts)")
        root = self.root = Path(self.root).absolute()
        for sub in ("munge", "state", "spool", "run", "log"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        # munged refuses sockets under directories other users cannot traverse (pytest tmp dirs are 0700).
        for p in [root, *root.parents[:-1]]:
            if not p.stat().st_mode & 0o001:
                p.chmod(p.stat().st_mode | 0o011)
        (root / "munge").chmod(0o755)
        key = root / "munge" / "munge.key"
        if not key.exists():
            key.write_bytes(os.urandom(1024))
            key.chmod(0o400)
        ctld, dbd, db, *ports = free_ports(3 + len(NODES))
        self.conf.write_text(slurm_conf(root, ctld, dict(zip(NODES, ports, strict=True)), self.cpus_per_node, dbd,
                                        self.gpus))
        if self.gpus:
            # gres/gpu counts device files: /dev/null stands for each (no cgroup constrains devices here).
            (root / "gres.conf").write_text("".join(f"NodeName={n} Name=gpu File=/dev/null Count={self.gpus}\n"
                                                    for n in NODES))
        dbd_conf = root / "slurmdbd.conf"
        dbd_conf.write_text(slurmdbd_conf(root, dbd, db))
        dbd_conf.chmod(0o600)  # slurmdbd refuses a config others can read
        if not (root / "db" / "mysql").is_dir():
            out = subprocess.run(["mariadb-install-db", "--no-defaults", f"--datadir={root / 'db'}", "--user=root",
                                  "--auth-root-authentication-method=normal", "--skip-test-db"],
                                 capture_output=True, text=True, timeout=300)
            if out.returncode != 0:
                raise RuntimeError(f"mariadb-install-db failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
        hosts = Path("/etc/hosts").read_text()
        (root / "hosts").write_text(hosts.rstrip("\n") + "\n" + "".join(f"{a} {n}\n" for n, a in NODES.items()))
        (root / "supervisor.sh").write_text(_SUPERVISOR)
        env = {**os.environ, "MINI_DIR": str(root), "MINI_NODES": " ".join(NODES), "MINI_DB_PORT": str(db),
               "MINI_DBD_PORT": str(dbd), "MINI_CLUSTER": CLUSTER, "MINI_HYPERPOD": "1" if self.hyperpod else ""}
        env.pop("SLURM_CONF", None)
        log = open(root / "log" / "supervisor.out", "ab")  # noqa: SIM115 - lives as long as the cluster
        self.proc = subprocess.Popen(
            preexec_fn=_die_with_parent,
            args=["setsid", "unshare", "--pid", "--fork", "--kill-child", "--mount-proc", "--mount",
             "--propagation", "private", "bash", str(root / "supervisor.sh")],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env)
        log.close()
        try:
            self._wait_idle(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_idle(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"the Slurm test cluster exited early ({self.proc.returncode}); "
                                   f"see {self.root}/log/\n{self.diagnostics()}")
            out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], env=self.env(), capture_output=True,
                                 text=True, timeout=10)
            last = out.stdout + out.stderr
            states = dict(line.split() for line in out.stdout.splitlines() if len(line.split()) == 2)
            if out.returncode == 0 and all(states.get(n) == "idle" for n in NODES):
                return
            time.sleep(0.2)
        raise RuntimeError(f"the Slurm test cluster did not reach {len(NODES)} idle nodes in {timeout:.0f} s; "
                           f"last sinfo: {last.strip()!r}\n{self.diagnostics()}")

    def diagnostics(self, lines: int = 15) -> str:
        """The tails of every daemon log, for error messages."""
        out = []
        for path in sorted((self.root / "log").glob("*")):
            tail = path.read_text(errors="replace").splitlines()[-lines:]
            out.append(f"--- {path.name}\n" + "\n".join(tail))
        return "\n".join(out)

    def stop(self) -> None:
        """Kill the namespace holder: the kernel then ends every daemon and job process inside."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)
        self.proc = None

    def __enter__(self) -> MiniCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    cluster = MiniCluster(Path(argv[0])).start()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # run the finally below on `kill` too
    print(f"export SLURM_CONF={cluster.conf}", flush=True)
    try:
        signal.pause()
    except KeyboardInterrupt:
        print("stopping the cluster", file=sys.stderr)
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
