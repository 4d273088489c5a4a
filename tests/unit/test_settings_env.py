"""Settings from the environment: no name cardquota reads is one a Kubernetes Service can set in a pod (service
links), and a value that cannot be read is one line naming the variable and the form expected (exit 2), only for
the command that reads it."""

from __future__ import annotations

import argparse
import ast
import io
import re
from pathlib import Path

import pytest
import yaml

from cardquota.cli.main import run
from cardquota.core.errors import InputError
from cardquota.operator.settings import (
    ExtenderSettings,
    Role,
    Settings,
    add_arguments,
    extender_settings,
    from_arguments,
    is_service_link_name,
)
from cardquota.runtime.limits import ServerLimits

REPO = Path(__file__).resolve().parents[2]
SOURCES = sorted(path for folder in ("cardquota", "operator", "webhooks") for path in (REPO / folder).rglob("*.py")
                 if not path.is_relative_to(REPO / "cardquota" / "operator")
                 and not path.is_relative_to(REPO / "cardquota" / "webhooks"))
CLUSTER = str(REPO / "examples" / "cluster.yaml")
RENAMED = {"CARDQUOTA_PORT": "CARDQUOTA_WEBHOOK_PORT_NUMBER", "CARDQUOTA_METRICS_PORT": "CARDQUOTA_METRICS_PORT_NUMBER",
           "CARDQUOTA_EXTENDER_PORT": "CARDQUOTA_EXTENDER_PORT_NUMBER"}
"""The names the settings had until they were found to be service-link names, and the names they have now."""
LINK = "tcp://10.96.12.34:443"


def _names_in_code() -> dict[str, str]:
    """Every string literal of the package that is a CARDQUOTA_* name (a variable read, or the name of one), with
    where it is; a name built at run time (f"CARDQUOTA_{...}") fails, since no test could see what it reads."""
    names: dict[str, str] = {}
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            where = f"{path.relative_to(REPO)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant) \
                    and str(node.values[0].value).startswith("CARDQUOTA_") and len(node.values) > 1 \
                    and not isinstance(node.values[1], ast.Constant):
                pytest.fail(f"{where}: an environment variable name built at run time")
            if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and node.value.startswith("CARDQUOTA_") and node.value.replace("_", "").isalnum():
                names.setdefault(node.value, where)
    return names


NAMES_IN_CODE = _names_in_code()


@pytest.mark.parametrize("name", [
    "CARDQUOTA_SERVICE_HOST", "CARDQUOTA_SERVICE_PORT", "CARDQUOTA_SERVICE_PORT_WEBHOOK", "CARDQUOTA_PORT",
    "CARDQUOTA_PORT_443_TCP", "CARDQUOTA_PORT_443_TCP_PROTO", "CARDQUOTA_PORT_443_TCP_PORT",
    "CARDQUOTA_PORT_443_TCP_ADDR", "CARDQUOTA_PORT_53_UDP", "CARDQUOTA_PORT_9_SCTP_ADDR", "KUBERNETES_SERVICE_HOST",
    "KUBERNETES_SERVICE_PORT_HTTPS", "CARDQUOTA_EXTENDER_PORT", "CARDQUOTA_METRICS_PORT", "CARDQUOTA_LISTEN_PORT",
    "CARDQUOTA_SERVICE_PORT_NUMBER",  # a Service "cardquota" with a port named "number"
    "CARDQUOTA_SERVICE_PORT_HTTPS_ALT",  # … a port named "https-alt"
    "CARDQUOTA_X_PORT_8080_TCP_PORT",  # Service "cardquota-x", port 8080
])
def test_names_a_service_can_set(name: str) -> None:
    assert is_service_link_name(name)


@pytest.mark.parametrize("name", [
    "CARDQUOTA_WEBHOOK_PORT_NUMBER", "CARDQUOTA_METRICS_PORT_NUMBER", "CARDQUOTA_EXTENDER_PORT_NUMBER",
    "CARDQUOTA_SERVICE", "CARDQUOTA_HOST", "CARDQUOTA_PORT_443", "CARDQUOTA_PORT_443_HTTP", "CARDQUOTA_PORT_X_TCP",
    "CARDQUOTA_SERVICE_HOSTNAME", "CARDQUOTA_DEBUG", "PORT", "_PORT", "HOSTNAME", "9_PORT",
])
def test_names_no_service_can_set(name: str) -> None:
    assert not is_service_link_name(name)


def test_no_name_the_code_reads_is_one_a_service_can_set() -> None:
    assert {"CARDQUOTA_WEBHOOK_PORT_NUMBER", "CARDQUOTA_EXTENDER_PORT_NUMBER", "CARDQUOTA_DEBUG"} <= set(NAMES_IN_CODE)
    assert {name: where for name, where in NAMES_IN_CODE.items() if is_service_link_name(name)} == {}


def test_the_old_names_are_link_names_and_no_longer_read() -> None:
    assert all(is_service_link_name(old) and not is_service_link_name(new) for old, new in RENAMED.items())
    assert set(RENAMED).isdisjoint(NAMES_IN_CODE)
    assert set(RENAMED.values()) <= set(NAMES_IN_CODE)


def test_every_name_a_shipped_container_sets_is_one_the_code_reads() -> None:
    for path in sorted((REPO / "manifests").rglob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            spec = ((document or {}).get("spec") or {}).get("template", {}).get("spec", {})
            for container in [*spec.get("initContainers", []), *spec.get("containers", [])]:
                for item in container.get("env", []):
                    assert item["name"] in NAMES_IN_CODE, f"{path.relative_to(REPO)}: {item['name']} is not read"


def _cli(argv: list[str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run("cardquota", argv, stdout=out, stderr=err)
    return code, err.getvalue()


BAD_VALUES = [
    (["operator", "--dev"], "CARDQUOTA_WEBHOOK_PORT_NUMBER", LINK, "a port number (0 to 65535)"),
    (["operator", "--dev"], "CARDQUOTA_WEBHOOK_PORT_NUMBER", "https", "a port number (0 to 65535)"),
    (["operator", "--dev"], "CARDQUOTA_METRICS_PORT_NUMBER", "tcp://10.96.0.9:8080", "a port number (0 to 65535)"),
    (["operator", "--dev"], "CARDQUOTA_METRICS_PORT_NUMBER", "65536", "a port number (0 to 65535)"),
    (["operator"], "CARDQUOTA_DEV", "yes please", "1 or 0"),
    (["operator", "--dev"], "CARDQUOTA_LOG_FORMAT", "yaml", "text or json"),
    (["operator", "--dev"], "CARDQUOTA_PUBLISH_WINDOW", "-1", "a number of seconds, 0 or more"),
    (["operator", "--dev"], "CARDQUOTA_PUBLISH_WINDOW", "nan", "a number of seconds, 0 or more"),
    (["operator", "--dev"], "CARDQUOTA_FAILURE_MODES", "Pod=sometimes", "KIND=open|closed items"),
    (["operator", "--dev"], "CARDQUOTA_SCHEDULERS", ",", "scheduler names, comma-separated"),
    (["operator", "--dev"], "CARDQUOTA_ROLE", "scheduler", "all, webhook or controller"),
    (["extender", "--no-patch"], "CARDQUOTA_EXTENDER_PORT_NUMBER", LINK, "a port number (0 to 65535)"),
    (["extender", "--no-patch"], "CARDQUOTA_EXTENDER_PORT_NUMBER", "８７１３", "a port number (0 to 65535)"),
    (["operator", "--dev"], "CARDQUOTA_MAX_CONNECTIONS", "0", "a whole number, 1 or more"),
    (["extender", "--no-patch"], "CARDQUOTA_MAX_CONNECTIONS", "lots", "a whole number, 1 or more"),
    (["operator", "--dev"], "CARDQUOTA_HANDSHAKE_TIMEOUT", "0", "a number of seconds above 0"),
    (["extender", "--no-patch"], "CARDQUOTA_IDLE_TIMEOUT", "inf", "a number of seconds above 0"),
]


@pytest.mark.parametrize(("argv", "name", "value", "form"), BAD_VALUES)
def test_an_unreadable_variable_is_one_line_naming_it_and_the_form(argv: list[str], name: str, value: str, form: str,
                                                                   monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Path) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))  # nothing may reach for a cluster
    monkeypatch.setenv(name, value)
    code, err = _cli(argv)
    assert code == 2
    assert err.count("\n") == 1
    assert err.startswith(f"cardquota: error: {name}: {value!r}: expected {form}")
    assert ("looks like a Kubernetes service link" in err) == value.startswith("tcp://")


@pytest.mark.parametrize(("name", "value"), [(name, value) for _, name, value, _ in BAD_VALUES])
def test_a_command_that_does_not_read_a_variable_is_not_stopped_by_it(name: str, value: str,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(name, value)
    for old in RENAMED:
        monkeypatch.setenv(old, LINK)
    code, err = _cli(["discover", "-f", CLUSTER, "-o", "json"])
    assert code == 0
    assert "CARDQUOTA" not in err


def _operator_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(argv)


def _extender_args(*argv: str) -> argparse.Namespace:
    """``cardquota extender``'s options as its own parser reads them (every option present, None when not given)."""
    from cardquota.cli.main import build_parser

    return build_parser("cardquota").parse_args(["extender", *argv])


def test_every_link_of_the_shipped_services_leaves_the_settings_alone() -> None:
    links = {"CARDQUOTA_SERVICE_HOST": "10.96.12.34", "CARDQUOTA_SERVICE_PORT": "443",
             "CARDQUOTA_SERVICE_PORT_WEBHOOK": "443", "CARDQUOTA_SERVICE_PORT_METRICS": "8080", "CARDQUOTA_PORT": LINK,
             "CARDQUOTA_PORT_443_TCP": LINK, "CARDQUOTA_PORT_443_TCP_PORT": "443",
             "CARDQUOTA_EXTENDER_PORT": "tcp://10.96.0.7:8713", "CARDQUOTA_EXTENDER_SERVICE_PORT": "8713",
             "CARDQUOTA_METRICS_PORT": "tcp://10.96.0.8:9090"}
    assert from_arguments(_operator_args([]), links) == Settings()
    assert extender_settings(_extender_args(), links) == ExtenderSettings()


def test_the_new_names_are_read_and_the_command_line_wins() -> None:
    env = {"CARDQUOTA_WEBHOOK_PORT_NUMBER": "8443", "CARDQUOTA_METRICS_PORT_NUMBER": "0", "CARDQUOTA_DEV": "true",
           "CARDQUOTA_PUBLISH_WINDOW": "0.5", "CARDQUOTA_EXTENDER_PORT_NUMBER": "9713", "CARDQUOTA_HOST": "127.0.0.1",
           "CARDQUOTA_SCHEDULER_CONF": "/etc/conf"}
    settings = from_arguments(_operator_args([]), env)
    assert (settings.port, settings.metrics_port, settings.dev, settings.publish_window) == (8443, 0, True, 0.5)
    assert from_arguments(_operator_args(["--port", "9000", "--metrics-port", "9001"]), env).port == 9000
    assert extender_settings(_extender_args(), env) == ExtenderSettings("127.0.0.1", 9713, "/etc/conf")
    assert extender_settings(_extender_args("--host", "::", "--port", "1"), env).port == 1
    assert extender_settings(_extender_args(), {"CARDQUOTA_SCHEDULERS": "volcano, vc-b"}).schedulers == {
        "volcano", "vc-b"}
    assert extender_settings(_extender_args("--schedulers", "only"), {"CARDQUOTA_SCHEDULERS": "vc-b"}).schedulers == {
        "only"}
    assert from_arguments(_operator_args([]), {"CARDQUOTA_WEBHOOK_PORT_NUMBER": ""}).port == Settings().port


def test_the_server_limits_come_from_the_options_then_the_variables_then_the_defaults() -> None:
    env = {"CARDQUOTA_MAX_CONNECTIONS": "100", "CARDQUOTA_HANDSHAKE_TIMEOUT": "2.5", "CARDQUOTA_IDLE_TIMEOUT": "10"}
    assert from_arguments(_operator_args([]), env).limits == ServerLimits(100, 2.5, 10.0)
    assert from_arguments(_operator_args(["--max-connections", "7", "--idle-timeout", "3"]), env).limits == \
        ServerLimits(7, 2.5, 3.0)
    assert from_arguments(_operator_args([]), {}).limits == ServerLimits()
    assert extender_settings(_extender_args("--idle-timeout", "1.5"), env).limits == ServerLimits(100, 2.5, 1.5)
    with pytest.raises(InputError, match="--max-connections"):
        from_arguments(_operator_args(["--max-connections", "0"]), {})


def test_the_extenders_account_is_never_refused_and_left_out_of_no_condition() -> None:
    """The extender writes the mGPU placement of pods, which the pod webhook refuses from anyone else once the pod
    is bound: the server lets its account through; the webhooks' ``not-cardquota-itself`` conditions name only the
    accounts that write queues and nodes (:attr:`Settings.own_users`)."""
    extender = "system:serviceaccount:gpu-admin:placer"
    settings = from_arguments(_operator_args(["--namespace", "gpu-admin"]),
                              {"CARDQUOTA_EXTENDER_SERVICE_ACCOUNT": "placer"})
    assert settings.unrefused_users == settings.own_users | {extender}
    assert extender not in settings.own_users
    assert from_arguments(_operator_args(["--extender-service-account", "other"]),
                          {"CARDQUOTA_EXTENDER_SERVICE_ACCOUNT": "placer"}).extender_service_account == "other"
    assert "system:serviceaccount:cardquota-system:cardquota-extender" in Settings().unrefused_users


def test_the_role_is_all_unless_the_variable_or_the_option_says_otherwise() -> None:
    assert Settings().role is Role.ALL
    assert from_arguments(_operator_args([]), {"CARDQUOTA_ROLE": "webhook"}).role is Role.WEBHOOK
    assert from_arguments(_operator_args(["--role", "controller"]), {"CARDQUOTA_ROLE": "webhook"}).role \
        is Role.CONTROLLER
    assert [(role.serves_webhooks, role.runs_controllers, role.follows_pods) for role in Role] == [
        (True, True, True), (True, False, False), (False, True, True)]


def test_a_bad_failure_mode_on_the_command_line_names_the_option() -> None:
    code, err = _cli(["operator", "--dev", "--failure-mode", "Pod=never"])
    assert code == 2
    assert err.startswith("cardquota: error: --failure-mode: 'Pod=never': expected KIND=open|closed")


def _option_names(command: str) -> set[str]:
    """Every long option of ``cardquota <command>``, as the variable name the CARDQUOTA_<OPTION> rule makes of it."""
    from cardquota.cli.main import build_parser

    parser = build_parser("cardquota")
    commands = next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
    return {"CARDQUOTA_" + option.removeprefix("--").replace("-", "_").upper()
            for action in commands.choices[command]._actions for option in action.option_strings
            if option.startswith("--")}


@pytest.mark.parametrize("command", ["operator", "extender"])
def test_every_variable_is_cardquota_and_an_option_of_the_command(command: str) -> None:
    """Issue 18 item 15: each variable a command reads is CARDQUOTA_<OPTION> for one of its options (the ports, whose
    short names Service links would set, have options named after their variables: --webhook-port-number, …)."""
    out = io.StringIO()
    run("cardquota", [command, "--help"], out, io.StringIO())
    read = set(re.findall(r"\bCARDQUOTA_[A-Z_]+\b", out.getvalue())) & set(NAMES_IN_CODE)
    assert read
    assert read <= _option_names(command), read - _option_names(command)


def test_trusted_sources_are_addresses_or_cidrs_from_the_option_then_the_variable() -> None:
    """--trusted-cidrs (CARDQUOTA_TRUSTED_CIDRS): comma-separated, blanks ignored; anything else is one line naming
    where it came from and what was wrong."""
    env = {"CARDQUOTA_TRUSTED_CIDRS": "10.0.0.0/24, fd00::1"}
    assert from_arguments(_operator_args([]), env).limits.trusted_networks == ("10.0.0.0/24", "fd00::1")
    assert from_arguments(_operator_args(["--trusted-cidrs", "192.168.1.7"]), env).limits.trusted_networks == \
        ("192.168.1.7",)
    assert extender_settings(_extender_args(), env).limits.trusted_networks == ("10.0.0.0/24", "fd00::1")
    assert from_arguments(_operator_args([]), {}).limits.trusted_networks == ()
    with pytest.raises(InputError, match=r"CARDQUOTA_TRUSTED_CIDRS.*'10\.0\.0/33' is not an IP address or CIDR"):
        from_arguments(_operator_args([]), {"CARDQUOTA_TRUSTED_CIDRS": "10.0.0/33"})
    with pytest.raises(InputError, match=r"--trusted-cidrs.*'api-server' is not an IP address or CIDR"):
        from_arguments(_operator_args(["--trusted-cidrs", "api-server"]), {})
