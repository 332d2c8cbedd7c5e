import pytest

from actors.links.shapes import Role, Shape, bisect, plan
from jobs.hosts.shapes import HostShape, describe, grudge, ruleset

FIVE = ["h1", "h2", "h3", "h4", "h5"]


def sees(drops: dict, host: str, hosts: list[str]) -> set[str]:
    return {h for h in hosts if h not in drops.get(host, frozenset())}


def symmetric(drops: dict, hosts: list[str]) -> bool:
    return all((b in drops.get(a, ())) == (a in drops.get(b, ())) for a in hosts for b in hosts)


def test_an_isolated_host_drops_every_other_and_every_other_drops_it():
    drops = grudge(HostShape.ISOLATE, FIVE, ["h3"])
    assert drops["h3"] == {"h1", "h2", "h4", "h5"}
    assert all(drops[h] == {"h3"} for h in FIVE if h != "h3")


def test_a_one_way_isolation_is_made_at_the_isolated_host_alone_on_the_connections_others_open():
    drops = grudge(HostShape.ISOLATE_ONE_WAY, FIVE, ["h2"])
    assert drops == {"h2": {"h1", "h3", "h4", "h5"}}
    rules = ruleset(drops["h2"], {h: f"10.0.0.{i}" for i, h in enumerate(FIVE, 11)}, one_way=True).splitlines()
    assert "-A INPUT -s 10.0.0.11 -m conntrack --ctdir ORIGINAL -j DROP" in rules
    assert sum(r.startswith("-A") and r.endswith("DROP") for r in rules) == 4


def test_a_cut_between_two_hosts_leaves_the_others_alone():
    drops = grudge(HostShape.CUT, FIVE, ["h2", "h4"])
    assert drops == {"h2": {"h4"}, "h4": {"h2"}}


def test_halves_are_jepsens_bisect_the_smaller_first_as_the_links_split_brokers():
    assert bisect(FIVE) == (["h1", "h2"], ["h3", "h4", "h5"])
    assert bisect(FIVE[:4]) == (["h1", "h2"], ["h3", "h4"])
    drops = grudge(HostShape.HALVES, FIVE)
    assert all(drops[h] == {"h3", "h4", "h5"} for h in ("h1", "h2"))
    assert all(drops[h] == {"h1", "h2"} for h in ("h3", "h4", "h5"))
    brokers = [1, 2, 3, 4, 5]  # the links' split-brokers and bridge-brokers over the same order: the same sides
    for shape, twin in ((HostShape.HALVES, Shape.SPLIT_BROKERS), (HostShape.BRIDGE, Shape.BRIDGE_BROKERS)):
        hosts = grudge(shape, [f"h{b}" for b in brokers])
        links = {(s.broker_id, int(s.link.split("-")[1])) for s in plan(twin, brokers) if s.role is Role.BROKER}
        assert links == {(int(h[1:]), int(o[1:])) for h, dropped in hosts.items() for o in dropped}


@pytest.mark.parametrize("hosts", [FIVE, FIVE[:4], FIVE[:3], FIVE + ["h6", "h7"]])
def test_a_bridge_host_reaches_both_halves_which_reach_each_other_only_through_it(hosts):
    drops = grudge(HostShape.BRIDGE, hosts)
    first, second = bisect(hosts)
    bridge = second[0]
    assert sees(drops, bridge, hosts) == set(hosts)
    assert all(bridge not in drops[h] for h in hosts if h in drops)
    for a in first:
        assert sees(drops, a, hosts) == set(first) | {bridge}
    for b in second[1:]:
        assert sees(drops, b, hosts) == set(second)
    assert symmetric(drops, hosts)


@pytest.mark.parametrize("n", range(4, 10))
def test_in_a_majorities_ring_every_host_sees_a_majority_and_no_two_the_same_one(n):
    hosts = [f"h{i}" for i in range(1, n + 1)]
    drops = grudge(HostShape.MAJORITIES_RING, hosts)
    views = [frozenset(sees(drops, h, hosts)) for h in hosts]
    assert all(len(v) > n // 2 for v in views)  # a majority each
    assert all(len(v) < n for v in views)  # and something cut for each
    assert len(set(views)) == n  # no two the same
    assert symmetric(drops, hosts)


def test_a_ring_of_five_sees_each_hosts_two_neighbours():
    drops = grudge(HostShape.MAJORITIES_RING, FIVE)
    assert drops["h1"] == {"h3", "h4"} and drops["h3"] == {"h1", "h5"} and drops["h5"] == {"h2", "h3"}


def test_the_order_given_is_the_order_halves_and_rings_follow():
    hosts = ["h5", "h1", "h4", "h2", "h3"]
    assert grudge(HostShape.HALVES, hosts)["h5"] == {"h4", "h2", "h3"}


@pytest.mark.parametrize("shape, hosts, named, message", [
    (HostShape.ISOLATE, FIVE, [], "isolate takes 1 host of h1, h2, h3, h4, h5, not none"),
    (HostShape.ISOLATE, FIVE, ["h9"], "not h9"),
    (HostShape.CUT, FIVE, ["h2"], "cut takes 2 hosts"),
    (HostShape.CUT, FIVE, ["h2", "h2"], "cut takes 2 hosts"),
    (HostShape.HALVES, FIVE, ["h2"], "halves takes no hosts"),
    (HostShape.ISOLATE, ["h1"], ["h1"], "needs another host"),
    (HostShape.HALVES, ["h1"], [], "2 hosts or more"),
    (HostShape.BRIDGE, ["h1", "h2"], [], "3 hosts or more"),
    (HostShape.MAJORITIES_RING, FIVE[:3], [], "4 hosts or more"),
])
def test_a_shape_that_cannot_be_made_says_why(shape, hosts, named, message):
    with pytest.raises(ValueError, match=message):
        grudge(shape, hosts, named)


def test_a_healed_ruleset_drops_nothing_and_every_ruleset_keeps_conntrack_tracking_from_the_first_packet():
    assert ruleset(frozenset(), {}) == ("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n"
                                        "-A INPUT -m conntrack --ctstate UNTRACKED -j ACCEPT\nCOMMIT\n")
    assert ruleset(frozenset({"h2"}), {"h2": "10.0.0.12"}).splitlines()[4:6] == [
        "-A INPUT -s 10.0.0.12 -j DROP", "-A INPUT -m conntrack --ctstate UNTRACKED -j ACCEPT"]  # the drops first


def test_a_shape_is_described_by_who_drops_whom():
    assert describe(HostShape.CUT, grudge(HostShape.CUT, FIVE, ["h2", "h4"])) == "cut: h2 drops h4; h4 drops h2"
    assert describe(HostShape.HALVES, {}) == "halves: nothing cut"
