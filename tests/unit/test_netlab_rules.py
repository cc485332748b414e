"""The network lab's pure part: names, the rulesets faults become, the tc commands and the
requirement check (the real lab: tests/netlab)."""

from __future__ import annotations

import pytest

from avatar_sdk.testing.netlab.rules import (
    CAP_NET_ADMIN,
    CAP_SYS_ADMIN,
    Blackhole,
    HostFacts,
    LabAddresses,
    Loss,
    Reject,
    lab_names,
    missing_requirements,
    owner_pid,
    rate_limit_commands,
    render_ruleset,
    setup_commands,
)

ROOT_CAPS = (1 << CAP_NET_ADMIN) | (1 << CAP_SYS_ADMIN)
ALL_TOOLS = {"ip": True, "tc": True, "nft": True}


def rules_of(script: str) -> list[str]:
    lines = [line.strip() for line in script.splitlines()]
    return [line for line in lines if line.startswith("iifname")]


def test_names_carry_the_creator_pid_and_nothing_else_is_claimed() -> None:
    client, server = lab_names(4242, 7)
    assert (client, server) == ("avlab-4242-7-c", "avlab-4242-7-s")
    assert owner_pid(client) == owner_pid(server) == 4242
    assert owner_pid("avlab-x-1-c") is None
    assert owner_pid("blue") is None
    assert len(client) < 64


def test_addresses_server_first_then_client_generations() -> None:
    addresses = LabAddresses()
    assert addresses.server == "10.231.0.1"
    assert [addresses.client(g) for g in range(3)] == ["10.231.0.2", "10.231.0.3", "10.231.0.4"]
    assert addresses.cidr(addresses.server) == "10.231.0.1/24"
    assert addresses.client(253) == addresses.client(0)  # wraps inside the subnet


def test_an_uplink_fault_acts_in_the_server_namespace_a_downlink_one_in_the_client() -> None:
    faults = [Loss(direction="up", protocol="udp", percent=5)]
    assert rules_of(render_ruleset(faults, "server")) == [
        'iifname "lab0" meta l4proto udp numgen random mod 10000 < 500 drop'
    ]
    assert rules_of(render_ruleset(faults, "client")) == []
    both = [Blackhole(direction="both")]
    assert rules_of(render_ruleset(both, "client")) == ['iifname "lab0" drop']
    assert rules_of(render_ruleset(both, "server")) == ['iifname "lab0" drop']


def test_ports_are_the_servers_destination_up_source_down() -> None:
    hole = [Blackhole(direction="both", protocol="tcp", port=8080)]
    assert rules_of(render_ruleset(hole, "server")) == ['iifname "lab0" tcp dport 8080 drop']
    assert rules_of(render_ruleset(hole, "client")) == ['iifname "lab0" tcp sport 8080 drop']
    any_proto = [Blackhole(direction="up", port=53)]
    assert rules_of(render_ruleset(any_proto, "server")) == ['iifname "lab0" th dport 53 drop']


def test_all_udp_but_the_relays_port() -> None:
    hole = [Blackhole(protocol="udp", except_port=80)]
    assert rules_of(render_ruleset(hole, "server")) == ['iifname "lab0" udp dport != 80 drop']
    assert rules_of(render_ruleset(hole, "client")) == ['iifname "lab0" udp sport != 80 drop']


def test_reject_kinds_and_fractional_loss() -> None:
    script = render_ruleset(
        [
            Reject(protocol="tcp"),
            Reject(protocol="udp"),
            Loss(direction="up", protocol="udp", percent=0.25),
        ],
        "server",
    )
    assert rules_of(script) == [
        'iifname "lab0" meta l4proto tcp reject with tcp reset',
        'iifname "lab0" meta l4proto udp reject with icmpx type port-unreachable',
        'iifname "lab0" meta l4proto udp numgen random mod 10000 < 25 drop',
    ]


def test_a_ruleset_replaces_the_table_in_one_transaction() -> None:
    script = render_ruleset([], "client")
    lines = script.splitlines()
    assert lines[:2] == ["table inet avatar_lab {}", "flush table inet avatar_lab"]
    assert rules_of(script) == []


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"direction": "sideways"}, "direction"),
        ({"protocol": "icmp"}, "protocol"),
        ({"port": 0}, "port"),
        ({"port": 70000}, "port"),
        ({"except_port": 0}, "except_port"),
        ({"except_port": 80}, "except_port needs"),
        ({"protocol": "udp", "port": 81, "except_port": 80}, "except_port needs"),
    ],
)
def test_bad_fault_arguments_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Blackhole(**kwargs)  # type: ignore[arg-type]


def test_bad_loss_is_refused() -> None:
    with pytest.raises(ValueError, match="loss"):
        Loss(percent=101)


def test_setup_never_names_an_interface_outside_the_lab() -> None:
    """Every command either makes a namespace or runs inside one (``-n``): nothing is made
    in the caller's namespace, the veth's peer goes straight into the server one."""
    commands = setup_commands("c", "s", LabAddresses())
    for argv in commands:
        assert argv[:3] == ["ip", "netns", "add"] or argv[1] == "-n", argv
    veth = next(argv for argv in commands if "veth" in argv)
    assert veth[-2:] == ["netns", "s"]


def test_rate_limit_commands() -> None:
    add = rate_limit_commands("s", "lab0", 300)
    assert add[:8] == ["tc", "-n", "s", "qdisc", "replace", "dev", "lab0", "root"]
    assert add[8:11] == ["tbf", "rate", "300kbit"]
    assert int(add[12]) >= 2048
    assert rate_limit_commands("s", "lab0", None) == [
        "tc", "-n", "s", "qdisc", "del", "dev", "lab0", "root",
    ]  # fmt: skip
    with pytest.raises(ValueError, match="rate"):
        rate_limit_commands("s", "lab0", 0)


def test_requirements_name_each_missing_part_with_its_fix() -> None:
    assert missing_requirements(HostFacts("linux", ROOT_CAPS, ALL_TOOLS)) == []
    (mac,) = missing_requirements(HostFacts("darwin", ROOT_CAPS, ALL_TOOLS))
    assert "Linux" in mac.what
    (user,) = missing_requirements(HostFacts("linux", 0, ALL_TOOLS))
    assert "root" in user.what and "sudo" in user.fix
    (tools,) = missing_requirements(HostFacts("linux", ROOT_CAPS, {"ip": True, "tc": True}))
    assert "nft" in tools.what and "apt-get install -y nftables" in tools.fix
    both = missing_requirements(HostFacts("linux", 1 << CAP_NET_ADMIN, {}))
    assert len(both) == 2
    assert "iproute2 nftables" in both[1].fix


async def test_a_lab_that_cannot_run_says_why_before_making_anything(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from avatar_sdk.testing.netlab import LabUnavailable, NetworkLab, lab  # noqa: PLC0415

    made: list[list[str]] = []
    monkeypatch.setattr(
        lab, "requirements", lambda: "the network lab needs:\n  - root; fix: run as root"
    )
    monkeypatch.setattr(NetworkLab, "_run_sync", lambda self, argv, stdin: made.append(argv))
    with pytest.raises(LabUnavailable, match="run as root") as caught:
        async with NetworkLab():
            pass
    assert caught.value.code == "invalid_state"
    assert made == []
