from django.apps import AppConfig


class TeamsAppConfig(AppConfig):
    name = "teams_app"
    verbose_name = "Teams"

    def ready(self) -> None:
        from goclaw.realtime import websocket_staff_group_register
        from goclaw.services import schedule_register
        from teams_app import context, tools, tools_delegation

        # one team's board live (its tasks and mailbox); every team's board changes, handoffs, delegations
        websocket_staff_group_register(r"team\.[0-9a-zA-Z_-]{1,64}",
                                       permission=("teams_app.view_teamtask", "teams_app.view_teammessage"))
        websocket_staff_group_register(r"teams", permission=(
            "teams_app.view_teamtask", "teams_app.view_delegation", "teams_app.view_handoffroute"))
        # an agent's group also carries its tasks, mailbox messages, handoffs and delegations
        websocket_staff_group_register(r"agent\.[a-z0-9_-]{1,64}", permission=(
            "teams_app.view_teamtask", "teams_app.view_teammessage", "teams_app.view_delegation",
            "teams_app.view_handoffroute"))
        schedule_register("team board sweep", "teams_app.tasks.board_sweep", "* * * * *")  # every minute
        tools.register()  # team_tasks, team_message
        tools_delegation.register()  # handoff, delegate
        context.register()  # TEAM.md, DELEGATION.md
