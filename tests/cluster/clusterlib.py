"""What the cluster tests (tests/cluster/test_*.py) share: hosts made of
network namespaces, a one-node Slurm cluster in a temporary directory, runs
bounded in time, and cleanup on every exit path.

Everything a test starts is its own: namespaces are named shdt<PID>..., the
addresses 10.233.1.N/24 exist only inside them, daemons are stopped by the
pid they wrote, and a run that overstays its time is killed with its process
group. The cleanup runs in `finally`, at exit, and on SIGTERM, SIGINT and
SIGHUP (turned into SystemExit, so `finally` blocks run). Namespaces left
behind by a run of these tests that was killed outright (SIGKILL) are
removed by the next run, once their owner's pid is gone.

Where the machine cannot host them (not root, no network namespaces, no
Slurm), a test ends with testlib.skip: one line, exit status 77, which
tests/run.py counts as skipped, never as passed.
"""
import os
import re
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import testlib  # noqa: E402

ENV = dict(os.environ, SHD_QUIET="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OPENBLAS_NUM_THREADS="1")
NS_PREFIX = "shdt"
SUBNET = "10.233.1"


class Unavailable(Exception):
    """The machine cannot do this (a privilege, a package, a kernel feature)."""


def on_signals():
    """SIGTERM, SIGINT and SIGHUP end the test through SystemExit, so every
    `finally` (and with it every cleanup) runs."""
    def stop(sig, frame):
        signal.signal(sig, signal.SIG_IGN)   # one cleanup, even if the signal repeats
        raise SystemExit(128 + sig)
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, stop)


def sh(cmd, timeout=30, check=True, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    if check and p.returncode:
        raise Unavailable("%s: exit %d: %s" % (" ".join(cmd), p.returncode, (p.stderr or p.stdout).strip()))
    return p


def run_bounded(cmd, timeout, cwd=None, env=None, on_timeout=None):
    """cmd in its own process group; killed with the group (and on_timeout
    called) when it overstays. Returns (exit status or None, stdout, stderr)."""
    p = subprocess.Popen(cmd, cwd=cwd, env=env or ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
        return p.returncode, out, err
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        if on_timeout:
            on_timeout()
        out, err = p.communicate()
        return None, out, err + "\n(killed after %ds)" % timeout
    except BaseException:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        raise


def pid_alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


# ---- hosts as network namespaces ----------------------------------------------

def ns_pids(ns):
    p = sh(["ip", "netns", "pids", ns], check=False)
    return [int(x) for x in p.stdout.split()]


def ns_delete(ns):
    """Kills what runs in the namespace (by pid), then deletes it."""
    for _ in range(20):
        pids = ns_pids(ns)
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)
    sh(["ip", "netns", "delete", ns], check=False)


def remove_stale_namespaces():
    """Namespaces of an earlier run of these tests whose process is gone."""
    p = sh(["ip", "netns", "list"], check=False)
    for line in p.stdout.split("\n"):
        m = re.match(r"^(%s(\d+)(?:h\d+|sw))\b" % NS_PREFIX, line)
        if m and not pid_alive(int(m.group(2))):
            ns_delete(m.group(1))


class NetHosts:
    """n hosts: network namespaces joined by a bridge in a further namespace
    (a switch; two hosts without a bridge module get one veth pair), host i
    at SUBNET.(i+1)/24 on its eth0. Nothing is added to the machine's own
    namespace. Use as a context manager."""

    def __init__(self, n):
        self.n = n
        self.tag = "%s%d" % (NS_PREFIX, os.getpid())
        self.names = ["%sh%d" % (self.tag, i) for i in range(n)]
        self.switch = self.tag + "sw"
        self.addrs = ["%s.%d" % (SUBNET, i + 1) for i in range(n)]
        self.made = []

    def __enter__(self):
        try:
            self._make()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()

    def _add(self, ns):
        sh(["ip", "netns", "add", ns])
        self.made.append(ns)

    def _make(self):
        if os.geteuid() != 0:
            raise Unavailable("network namespaces need root")
        if not sh(["sh", "-c", "command -v ip"], check=False).stdout.strip():
            raise Unavailable("no `ip` (iproute2)")
        self._add(self.switch)
        bridge = sh(["ip", "netns", "exec", self.switch, "ip", "link", "add", "br0", "type", "bridge"], check=False)
        if bridge.returncode and self.n != 2:
            raise Unavailable("no bridge to join %d hosts: %s" % (self.n, bridge.stderr.strip()))
        if not bridge.returncode:
            sh(["ip", "netns", "exec", self.switch, "ip", "link", "set", "br0", "up"])
        for ns in self.names:
            self._add(ns)
        for i, ns in enumerate(self.names):
            ex = ["ip", "netns", "exec", ns]
            if bridge.returncode == 0:
                sh(ex + ["ip", "link", "add", "eth0", "type", "veth", "peer", "name", "p%d" % i, "netns",
                         self.switch])
                sh(["ip", "netns", "exec", self.switch, "ip", "link", "set", "p%d" % i, "master", "br0"])
                sh(["ip", "netns", "exec", self.switch, "ip", "link", "set", "p%d" % i, "up"])
            elif i == 0:   # two hosts without a bridge: one veth pair between them
                sh(ex + ["ip", "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns",
                         self.names[1]])
            sh(ex + ["ip", "addr", "add", "%s/24" % self.addrs[i], "dev", "eth0"])
            sh(ex + ["ip", "link", "set", "eth0", "up"])
            sh(ex + ["ip", "link", "set", "lo", "up"])

    def close(self):
        for ns in reversed(self.made):
            ns_delete(ns)
        self.made = []

    def kill_all(self):
        for ns in self.made:
            for pid in ns_pids(ns):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def tx_bytes(self):
        """Bytes sent by the hosts' eth0 so far."""
        return sum(self.tx_bytes_per_host())

    def tx_bytes_per_host(self):
        """Bytes sent by each host's eth0 so far (its interface counter,
        /sys/class/net/eth0/statistics/tx_bytes: frames with their
        Ethernet, IP and TCP headers, and the TCP acknowledgements)."""
        return [int(sh(["ip", "netns", "exec", ns, "cat", "/sys/class/net/eth0/statistics/tx_bytes"]).stdout)
                for ns in self.names]

    def shape(self, rate_bits):
        """Every host sends at most rate_bits bit/s (a token bucket, tbf, as
        the root qdisc of its eth0; the switch's ports stay unshaped, so a
        host's link is rate_bits each way, as a full-duplex NIC's); None
        removes the shaping. The bucket holds 4 ms of the rate (at least
        64 KiB: a kernel of 250 Hz refills it every 4 ms, and a smaller
        one caps the rate below the one asked for), and a packet waits at
        most 50 ms in the queue before it is dropped (TCP then slows)."""
        for ns in self.names:
            ex = ["ip", "netns", "exec", ns, "tc", "qdisc"]
            if rate_bits is None:
                sh(ex + ["del", "dev", "eth0", "root"], check=False)
                continue
            burst = max(65536, int(rate_bits / 8 * 0.004))
            p = sh(ex + ["replace", "dev", "eth0", "root", "tbf", "rate", "%dbit" % rate_bits, "burst", str(burst),
                         "latency", "50ms"], check=False)
            if p.returncode:
                raise Unavailable("tc qdisc tbf on %s's eth0: %s (the sch_tbf module?)" % (ns, p.stderr.strip()))

    def write_agent(self, path, private=None):
        """The rsh agent mpirun starts its daemons with: `AGENT HOST COMMAND`
        runs COMMAND with `ip netns exec` in the namespace of HOST's address.
        private=(DIR, [SUBDIR...]): the hosts after the first see DIR as an
        empty file system of their own (a tmpfs, in the mount namespace `ip
        netns exec` makes) holding only the SUBDIRs: hosts that do not share
        a file system."""
        import shlex
        # Each host's daemon keeps its session directory apart: the hosts
        # share this machine's /tmp and its hostname, so Open MPI's
        # /tmp/ompi.HOST.UID/jf.JOB would be one directory that the daemons
        # race to make ("File exists": orte_init fails, about 1 start in 60).
        sessions = os.path.join(os.path.dirname(os.path.abspath(path)), "sessions")
        for ns in self.names:
            os.makedirs(os.path.join(sessions, ns), exist_ok=True)
        cases = "\n".join("  %s) ns=%s ;;" % (a, ns) for a, ns in zip(self.addrs, self.names))
        mount = ""
        if private:
            d, subs = private
            made = "".join(" && mkdir -p %s" % shlex.quote(os.path.join(d, x)) for x in subs)
            mount = ('if [ "$ns" != %s ]; then\n  exec ip netns exec "$ns" /bin/sh -c "mount -t tmpfs shd-private '
                     '%s%s && $*"\nfi\n' % (self.names[0], shlex.quote(d), made))
        export = "export OMPI_MCA_orte_tmpdir_base=%s/\"$ns\"\n" % shlex.quote(sessions)
        with open(path, "w") as f:
            f.write("#!/bin/sh\n# Written by tests/cluster/clusterlib.py: an rsh for hosts that are network "
                    "namespaces.\nhost=\"$1\"; shift\ncase \"$host\" in\n%s\n  *) echo \"$0: unknown host $host\" "
                    ">&2; exit 255 ;;\nesac\n%s%sexec ip netns exec \"$ns\" /bin/sh -c \"$*\"\n" % (cases, export, mount))
        os.chmod(path, 0o755)
        return path

    def write_hostfile(self, path, slots):
        with open(path, "w") as f:
            f.write("".join("%s slots=%d\n" % (a, slots) for a in self.addrs))
        return path

    def mpirun_args(self, agent, hostfile):
        """TCP only, on the hosts' subnet; daemons started by the agent.
        The hosts share this machine's cores (and the suite runs other
        tests beside): a rank waiting for a message yields its core
        (mpi_yield_when_idle) rather than spin on it, which Open MPI does
        only when it sees more ranks than slots on a host; spinning, four
        ranks on two loaded cores took the GPT-2 run past its time limit.
        rtc_hwloc_vmhole none: Open MPI 4.1's daemons share their hardware
        topology through memory mapped at an address they guess, and a
        daemon whose guess meets its stack dies (SIGSEGV in
        hwloc_shmem_topology_write, about 1 start in 20 here) after
        detaching, so mpirun waits for it for ever (docs/cluster.md)."""
        net = SUBNET + ".0/24"
        return ["mpirun", "--hostfile", hostfile, "--mca", "plm_rsh_agent", agent, "--mca", "plm_rsh_no_tree_spawn",
                "1", "--mca", "pml", "ob1", "--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include", net, "--mca",
                "oob_tcp_if_include", net, "--mca", "mpi_yield_when_idle", "1", "--mca", "rtc_hwloc_vmhole", "none",
                "--bind-to", "none"]

    def mpirun(self, agent, hostfile, np_, argv, cwd, timeout=180, env=None, extra=()):
        """mpirun started on the first host; bounded in time (everything in
        the namespaces is killed when it overstays). env: the variables
        added to ENV, passed on to every rank (-x); extra: more mpirun
        options."""
        xs = sum((["-x", k] for k in sorted(env or {})), [])
        cmd = (["ip", "netns", "exec", self.names[0]] + self.mpirun_args(agent, hostfile) + list(extra) + xs +
               ["-np", str(np_)] + argv)
        return run_bounded(cmd, timeout, cwd=cwd, env=dict(ENV, **(env or {})), on_timeout=self.kill_all)


# ---- a one-node Slurm cluster ---------------------------------------------------

def free_port():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Slurm:
    """munged, slurmctld and slurmd as a one-node cluster whose files (key,
    socket, configuration, state, spool, logs, pid files) live in a
    temporary directory of its own (searchable by the munge user), on ports
    no one listens on; stopped by the pids they wrote, the directory removed.
    The client commands find it through SLURM_CONF (self.env). Use as a
    context manager."""

    DAEMONS = ("slurmd", "slurmctld", "munged")

    def __init__(self, cpus):
        import tempfile
        self.d, self.cpus = tempfile.mkdtemp(prefix="shd-slurm-"), cpus
        d = self.d
        self.pidfiles = {"munged": os.path.join(d, "munge", "munged.pid"), "slurmctld": os.path.join(d, "slurmctld.pid"),
                         "slurmd": os.path.join(d, "slurmd.pid")}
        self.conf = os.path.join(d, "slurm.conf")
        self.env = dict(ENV, SLURM_CONF=self.conf)
        self.started = []

    def __enter__(self):
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()

    def _start(self):
        import pwd
        if os.geteuid() != 0:
            raise Unavailable("a Slurm cluster of its own needs root")
        for prog in ("munged", "slurmctld", "slurmd", "sbatch", "srun", "scontrol"):
            if not sh(["sh", "-c", "command -v " + prog], check=False).stdout.strip():
                raise Unavailable("no %s (apt-get install slurmctld slurmd slurm-client munge)" % prog)
        try:
            mu = pwd.getpwnam("munge")
        except KeyError:
            raise Unavailable("no munge user (apt-get install munge)")
        os.chmod(self.d, 0o755)
        md = os.path.join(self.d, "munge")
        os.mkdir(md)
        os.chmod(md, 0o755)   # munged wants its socket's directory searchable by all, writable by none
        os.chown(md, mu.pw_uid, mu.pw_gid)
        key = os.path.join(md, "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o400)
        os.chown(key, mu.pw_uid, mu.pw_gid)
        self.socket = os.path.join(md, "munge.socket")
        self._daemon("munged", ["runuser", "-u", "munge", "--", "munged", "--socket=" + self.socket,
                                "--key-file=" + key, "--pid-file=" + self.pidfiles["munged"],
                                "--log-file=" + os.path.join(md, "munged.log"), "--seed-file=" + os.path.join(md, "seed")])
        host = sh(["hostname", "-s"]).stdout.strip()
        for sub in ("state", "spool"):
            os.mkdir(os.path.join(self.d, sub))
        with open(self.conf, "w") as f:
            f.write(SLURM_CONF.format(d=self.d, host=host, cpus=self.cpus, ctl=free_port(), slurmd=free_port(),
                                      socket=self.socket))
        # PMIx's per-step directories (spmix_appdir_UID_JOB.STEP) go under the
        # cluster's own directory: in /tmp, where they are put by default,
        # one left by an earlier cluster (a step killed at its time limit
        # leaves its own) has the name of this cluster's step with the same
        # job number, and that step fails to launch ("File exists").
        os.mkdir(os.path.join(self.d, "pmix"))
        with open(os.path.join(self.d, "mpi.conf"), "w") as f:
            f.write("PMIxCliTmpDirBase=%s\n" % os.path.join(self.d, "pmix"))
        self._daemon("slurmctld", ["slurmctld", "-f", self.conf, "-i"])
        self._daemon("slurmd", ["slurmd", "-f", self.conf])
        for _ in range(100):
            p = sh(["sinfo", "-h", "-o", "%T"], check=False, env=self.env)
            if p.stdout.strip() == "idle":
                return
            time.sleep(0.2)
        raise Unavailable("the node did not come up: sinfo says %r %s\n%s" % (p.stdout.strip(), p.stderr.strip(),
                                                                             self.logs()))

    def _daemon(self, name, cmd):
        p = sh(cmd, check=False, env=self.env)
        if p.returncode:
            raise Unavailable("%s did not start: %s %s" % (name, p.stdout.strip(), p.stderr.strip()))
        self.started.append(name)
        for _ in range(50):
            if os.path.exists(self.pidfiles[name]) and open(self.pidfiles[name]).read().strip():
                return
            time.sleep(0.1)
        raise Unavailable("%s wrote no pid file" % name)

    def pid(self, name):
        try:
            return int(open(self.pidfiles[name]).read().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def logs(self):
        out = []
        for f in ("slurmctld.log", "slurmd.log", os.path.join("munge", "munged.log")):
            try:
                out.append("---- %s\n%s" % (f, open(os.path.join(self.d, f)).read()[-3000:]))
            except OSError:
                pass
        return "\n".join(out)

    def close(self):
        """Every daemon started, by the pid it wrote: SIGTERM, then SIGKILL;
        then the directory."""
        for name in self.DAEMONS:
            if name not in self.started:
                continue
            pid = self.pid(name)
            if not pid:
                continue
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
            for _ in range(50):
                if not pid_alive(pid):
                    break
                time.sleep(0.1)
            else:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        self.started = []
        import shutil
        shutil.rmtree(self.d, ignore_errors=True)

    def job_state(self, jobid):
        p = sh(["scontrol", "show", "job", str(jobid)], check=False, env=self.env)
        m = re.search(r"JobState=(\S+)", p.stdout)
        return m.group(1) if m else None

    def wait_job(self, jobid, timeout):
        """Waits until the job has ended; its state (None when it overstays,
        and then it is cancelled)."""
        end = time.time() + timeout
        while time.time() < end:
            st = self.job_state(jobid)
            if st not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", None):
                return st
            time.sleep(0.5)
        sh(["scancel", "--signal=KILL", "--full", str(jobid)], check=False, env=self.env)
        return None


# A cluster of one node: no accounting, no cgroups (linuxproc tracks the
# processes), root runs the daemons and the jobs, KillWait (the time between
# SIGTERM and SIGKILL at a time limit) 20 s.
SLURM_CONF = """ClusterName=shdtest
SlurmctldHost={host}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort={ctl}
SlurmdPort={slurmd}
AuthType=auth/munge
AuthInfo=socket={socket}
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
KillWait=20
MinJobAge=600
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MailProg=/bin/true
NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN
PartitionName=test Nodes={host} Default=YES MaxTime=INFINITE OverSubscribe=FORCE:4 State=UP
"""
