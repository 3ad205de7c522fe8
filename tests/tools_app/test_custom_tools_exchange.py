"""Custom tools in and out as JSON: the seed's shape, all-or-nothing imports that name every problem with its
position, exports that never carry env values; through the service and the management commands."""
from __future__ import annotations

import json

import pytest
from django.core.management import CommandError, call_command

from goclaw.errors import ValidationError
from tests.factories import make_agent
from tools_app import pipeline
from tools_app.calls import ToolCall
from tools_app.models import CustomTool
from tools_app.services.custom_tools import custom_tool_create, custom_tool_export, custom_tool_import

pytestmark = pytest.mark.django_db

# The seed's example, word for word, except the command: dig is not installed here, getent is.
DNS_LOOKUP = {"name": "dns_lookup", "description": "Look up DNS records for a domain",
              "parameters": {"type": "object",
                             "properties": {"domain": {"type": "string", "description": "Domain name"},
                                            "record_type": {"type": "string",
                                                            "enum": ["A", "AAAA", "MX", "CNAME", "TXT"]}},
                             "required": ["domain"]},
              "command": "getent hosts {{.domain}}", "timeout_seconds": 10, "enabled": True}
SECRET = "exported-never-4b1d9e77"


def test_the_seeds_dns_lookup_example_imports_and_runs():
    agent = make_agent()
    assert custom_tool_import(actor=None, data=DNS_LOOKUP) == {"created": ["dns_lookup"], "updated": []}
    row = CustomTool.objects.get(name="dns_lookup")
    assert (row.timeout_seconds, row.agent, row.group, row.enabled) == (10, None, "custom", True)
    out = pipeline.execute(ToolCall(agent, "dns_lookup", {"domain": "localhost"}))
    assert out.status == "ok", out.as_dict()
    assert "localhost" in out.for_llm and "[exit code 0]" in out.for_llm
    bad = pipeline.execute(ToolCall(agent, "dns_lookup", {"domain": "localhost", "record_type": "SOA"}))
    assert bad.status != "ok"  # the schema's enum holds


def test_an_import_with_problems_saves_nothing_and_names_every_problem_with_its_position():
    make_agent(key="known")
    entries = [
        DNS_LOOKUP,
        {**DNS_LOOKUP, "name": "second", "command": "echo {{.missing}}"},
        {**DNS_LOOKUP, "name": "exec"},
        {**DNS_LOOKUP, "name": "fourth", "agent": "nobody", "timeout_seconds": 99999},
        {**DNS_LOOKUP, "name": "dns_lookup", "agent": "known"},
        {"name": "sixth", "colour": "red"},
        "not an object",
    ]
    with pytest.raises(ValidationError) as err:
        custom_tool_import(actor=None, data=entries)
    problems = err.value.details["problems"]
    assert err.value.code == "custom_tool_import_invalid"
    for expected in ("[1].command: placeholder {{.missing}} names no declared parameter",
                     "[2].name: tool name collision: exec is a built-in tool",
                     "[3].agent: no agent has the key 'nobody'",
                     "[3].timeout_seconds: must be a whole number of seconds from 1 to 3600",
                     "[4].name: dns_lookup is also defined at [0], visible to the same agent",
                     "[5].colour: unknown field", "[5].description: is required", "[6]: must be an object"):
        assert expected in problems, problems
    assert not CustomTool.objects.exists()


def test_a_reimport_updates_the_tool_of_the_same_name_and_agent_and_keeps_its_env():
    agent = make_agent(key="owner")
    custom_tool_import(actor=None, data=[{**DNS_LOOKUP, "agent": "owner", "env": {"TOKEN": SECRET}}])
    report = custom_tool_import(actor=None, data=[{**DNS_LOOKUP, "agent": "owner", "description": "new words"}])
    assert report == {"created": [], "updated": ["dns_lookup (owner)"]}
    row = CustomTool.objects.get(agent=agent)
    assert row.description == "new words" and row.env_names == ["TOKEN"]


def test_export_is_the_import_format_without_env_values_and_round_trips(tmp_path):
    agent = make_agent(key="exporter")
    custom_tool_create(actor=None, env={"TOKEN": SECRET}, agent=agent, working_dir="sub", **DNS_LOOKUP)
    custom_tool_create(actor=None, **{**DNS_LOOKUP, "name": "global_one"})
    exported = custom_tool_export()
    assert SECRET not in json.dumps(exported)
    assert exported[0] == {**DNS_LOOKUP, "name": "global_one", "working_dir": "", "agent": None}
    assert exported[1] == {**DNS_LOOKUP, "working_dir": "sub", "agent": "exporter"}
    assert custom_tool_export(agent=agent) == [exported[1]]
    CustomTool.objects.all().delete()
    assert custom_tool_import(actor=None, data=exported)["created"] == ["global_one", "dns_lookup (exporter)"]


def test_the_management_commands_import_and_export(tmp_path, capsys):
    make_agent(key="cli-agent")
    source = tmp_path / "tools.json"
    source.write_text(json.dumps([{**DNS_LOOKUP, "agent": "cli-agent", "env": {"TOKEN": SECRET}}]))
    call_command("import_tools", str(source))
    assert "imported 1 tool(s): created dns_lookup (cli-agent)" in capsys.readouterr().out
    target = tmp_path / "out.json"
    call_command("export_tools", "--agent", "cli-agent", str(target))
    assert json.loads(target.read_text()) == [{**DNS_LOOKUP, "working_dir": "", "agent": "cli-agent"}]
    call_command("export_tools")
    assert SECRET not in capsys.readouterr().out
    source.write_text(json.dumps({**DNS_LOOKUP, "name": "other", "parameters": {"type": "string"}}))
    with pytest.raises(CommandError, match='parameters: must be a JSON Schema of "type": "object"'):
        call_command("import_tools", str(source))
    with pytest.raises(CommandError, match="no agent has the key 'ghost'"):
        call_command("export_tools", "--agent", "ghost")
