"""What a host is and the commands that make it: names, addresses, mounts, sshd, the way in."""
from pathlib import Path

import pydantic
import pytest

from jobs.hosts.layout import (
    HOST_KEY,
    HostsLayout,
    bashrc,
    bound_read_only,
    bridge_commands,
    enter_command,
    etc_hosts,
    forward_rule,
    init_command,
    init_script,
    network_commands,
)

LAYOUT = HostsLayout(count=3, directory=Path("/tmp/k/hosts"))


def test_hosts_are_numbered_from_h1_at_the_subnets_11_with_the_bridge_at_1():
    assert [(h.short, h.name, h.address, h.veth) for h in LAYOUT.hosts] == [
        ("h1", "kray-h1", "10.77.0.11", "krayv-h1"), ("h2", "kray-h2", "10.77.0.12", "krayv-h2"),
        ("h3", "kray-h3", "10.77.0.13", "krayv-h3")]
    assert (LAYOUT.bridge, LAYOUT.bridge_address) == ("kraybr0", "10.77.0.1")
    other = HostsLayout(count=200, subnet="192.168.5.0/24", prefix="t2", directory=Path("/x"))
    assert other.hosts[-1].address == "192.168.5.210" and other.hosts[-1].veth == "t2v-h200"
    assert max(len(h.veth) for h in other.hosts) <= 15  # the kernel's limit on an interface's name


def test_a_host_is_found_by_name_short_name_or_address():
    assert LAYOUT.host("h2") == LAYOUT.host("kray-h2") == LAYOUT.host("10.77.0.12") == LAYOUT.hosts[1]
    with pytest.raises(KeyError):
        LAYOUT.host("h4")


@pytest.mark.parametrize("bad", [dict(count=0), dict(count=201), dict(subnet="10.0.0.0/16"), dict(prefix="Kray"),
                                 dict(prefix="averylongname"), dict(subnet="nonsense")])
def test_a_layout_out_of_bounds_is_refused(bad):
    with pytest.raises(pydantic.ValidationError):
        HostsLayout(**{"count": 2, "directory": Path("/x"), **bad})


def test_every_host_knows_every_hosts_name():
    assert etc_hosts(LAYOUT).splitlines() == ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback",
                                              "10.77.0.11\tkray-h1 h1", "10.77.0.12\tkray-h2 h2", "10.77.0.13\tkray-h3 h3"]


def test_the_bridge_and_each_hosts_link_to_it():
    assert bridge_commands(LAYOUT) == [["ip", "link", "add", "kraybr0", "type", "bridge"],
                                       ["ip", "addr", "add", "10.77.0.1/24", "dev", "kraybr0"],
                                       ["ip", "link", "set", "kraybr0", "up"]]
    assert forward_rule(LAYOUT, "-C") == ["iptables", "-C", "FORWARD", "-i", "kraybr0", "-o", "kraybr0", "-j", "ACCEPT"]
    h2 = LAYOUT.hosts[1]
    assert network_commands(LAYOUT, h2) == [
        ["ip", "netns", "add", "kray-h2"],
        ["ip", "link", "add", "krayv-h2", "type", "veth", "peer", "name", "eth0", "netns", "kray-h2"],
        ["ip", "link", "set", "krayv-h2", "master", "kraybr0", "up"],
        ["ip", "netns", "exec", "kray-h2", "ip", "addr", "add", "10.77.0.12/24", "dev", "eth0"],
        ["ip", "netns", "exec", "kray-h2", "ip", "link", "set", "eth0", "up"],
        ["ip", "netns", "exec", "kray-h2", "ip", "link", "set", "lo", "up"],
    ]


def test_what_the_private_home_would_hide_is_bound_back_once_each():
    home = Path("/root")
    assert bound_read_only(home, [Path("/root/.pyenv/versions/3.11.7"), Path("/work/kray/.venv"), Path("/work/kray"),
                                  Path("/root/src/kray"), Path("/root/src/kray/.venv"), Path("/root")]) == [
        Path("/root/.pyenv/versions/3.11.7"), Path("/root/src/kray")]
    assert bound_read_only(home, [Path("/usr"), Path("/opt/venv")]) == []
    assert bound_read_only(Path("/tmp"), [Path("/tmp/ci/.venv"), Path("/tmp/ci"), Path("/root/.pyenv")]) == [Path("/tmp/ci")]


def test_a_hosts_pid_1_binds_its_dirs_before_it_hides_their_paths_then_runs_sshd_on_its_address():
    h1 = LAYOUT.hosts[0]
    script = init_script(LAYOUT, h1, Path("/root"), [Path("/root/.pyenv/versions/3.11.7"), Path("/work/kray")])
    lines = script.splitlines()
    assert lines[0] == "set -e"
    assert lines[1:4] == ["mkdir -p /tmp/k/hosts/h1/home/.pyenv/versions/3.11.7",
                          "mount --bind /root/.pyenv/versions/3.11.7 /tmp/k/hosts/h1/home/.pyenv/versions/3.11.7",
                          "mount -o remount,bind,ro /tmp/k/hosts/h1/home/.pyenv/versions/3.11.7"]
    order = [lines.index(x) for x in ("mount --bind /tmp/k/hosts/etc-hosts /etc/hosts",
                                      "mount --rbind /tmp/k/hosts/h1/home /run/kray/home",
                                      "mount --rbind /tmp/k/hosts/h1/tmp /run/kray/tmp",
                                      "mount --rbind /run/kray/home /root", "mount --rbind /run/kray/tmp /tmp")]
    assert order == sorted(order)  # both sources bound while their paths (under /tmp here) still resolve
    assert "mount -t tmpfs -o mode=1777 tmpfs /dev/shm" in lines and "hostname kray-h1" in lines
    assert lines[-1].startswith("exec /usr/sbin/sshd -D -e -o ListenAddress=10.77.0.11 ")
    assert f"-h /root/{HOST_KEY}" in lines[-1]
    in_tmp = init_script(LAYOUT, h1, Path("/root"), [Path("/tmp/ci/.venv"), Path("/tmp/ci")]).splitlines()
    assert in_tmp[1:4] == ["mkdir -p /tmp/k/hosts/h1/tmp/ci", "mount --bind /tmp/ci /tmp/k/hosts/h1/tmp/ci",
                           "mount -o remount,bind,ro /tmp/k/hosts/h1/tmp/ci"]  # a checkout under /tmp, as CI's
    argv = init_command(LAYOUT, h1, Path("/root"), [])
    assert argv[:13] == ["ip", "netns", "exec", "kray-h1", "unshare", "--mount", "--uts", "--pid", "--fork",
                         "--mount-proc", "--propagation", "private", "sh"]


def test_a_hosts_shell_finds_the_projects_tools_and_ray_is_told_one_auth_mode_and_its_share():
    assert bashrc(Path("/work/kray/.venv"), "disabled", 2, 2048, 256, "10.77.0.1:7707").splitlines() == [
        "export PATH=/work/kray/.venv/bin:$PATH", "export KRAY_VENV=/work/kray/.venv", "export RAY_USAGE_STATS_ENABLED=0",
        "export RAY_AUTH_MODE=disabled",
        "export KRAY_NODE_NUM_CPUS=2 KRAY_NODE_MEMORY=2048 KRAY_NODE_OBJECT_STORE_MEMORY=256",
        "export KRAY_HOSTS_CONTROL=10.77.0.1:7707"]
    assert enter_command(4242, Path("/root"), ["ps", "-e"]) == [
        "nsenter", "--target", "4242", "--all", "env", "-i", "HOME=/root",
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "bash", "-lc", 'exec "$@"', "bash", "ps", "-e"]
