"""Pages for people, mounted at /teams/: the teams index, each team's live board, a task's page and its actions."""
from django.urls import path, re_path

from teams_app import views

app_name = "teams"

urlpatterns = [
    path("", views.team_index, name="index"),
    path("<int:team_id>/board/", views.board, name="board"),
    re_path(r"^(?P<team_id>[0-9]+)/board/(?P<identifier>[A-Za-z0-9-]{1,20})/$", views.task_detail, name="task"),
    re_path(r"^(?P<team_id>[0-9]+)/board/(?P<identifier>[A-Za-z0-9-]{1,20})/(?P<action>[a-z_]{1,20})/$",
            views.task_action, name="task_action"),
    re_path(r"^(?P<team_id>[0-9]+)/members/(?P<agent_key>[A-Za-z0-9_-]{1,64})/stop/$", views.member_stop,
            name="member_stop"),
]
