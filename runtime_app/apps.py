from django.apps import AppConfig


class RuntimeAppConfig(AppConfig):
    name = "runtime_app"
    verbose_name = "Hosted agents"

    def ready(self) -> None:
        from goclaw.realtime import websocket_staff_group_register
        from goclaw.services import schedule_register
        from runtime_app import tools

        # every session's status and messages (the console's sessions page) and one session's timeline
        view = ("runtime_app.view_session", "runtime_app.view_sessionmessage")  # the events carry message text
        websocket_staff_group_register(r"sessions", permission=view)
        websocket_staff_group_register(r"session\.[0-9a-f-]{36}", permission=view)
        websocket_staff_group_register(r"agent\.[a-z0-9_-]{1,64}", permission=view)
        schedule_register("runtime subagent archive", "runtime_app.tasks.archive_subagents", "* * * * *")
        tools.register()  # the sessions group: sessions_list, sessions_history, sessions_send, session_status, spawn
        # evaluate_loop; delegations to hosted agents run as their sessions, judged by the source's quality gates
        from runtime_app import delegation, evaluate

        evaluate.register()
        delegation.register()
        # hosted teammates: woken by their tasks and mailbox, handed conversations, stopped from the board
        from runtime_app import teamwork

        teamwork.register()
        schedule_register("team members stuck sweep", "runtime_app.tasks.team_members_stuck_sweep", "* * * * *")

        # providers' API keys are sealed to their rows: rotate_encryption_key re-seals them (docs/secrets.md)
        from goclaw.secrets import encrypted_field_register
        from runtime_app.models import LLMProvider
        from runtime_app.services.providers import api_key_seal_context

        encrypted_field_register(LLMProvider, "api_key_sealed", associated_data=lambda row: api_key_seal_context(row.pk))
