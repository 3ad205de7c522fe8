"""The board page for people (/teams/…): staff only, columns by status, filters, the task page, and the recovery
actions (each one service call recorded as a TeamEvent with the person as actor, errors shown as messages)."""
from __future__ import annotations

import json
from datetime import datetime

import pytest
from django.contrib.auth.models import Permission
from django.core.serializers.json import DjangoJSONEncoder
from django.test import Client
from django.test.html import Element, parse_html
from django.urls import reverse

from teams_app.actors import Actor
from teams_app.models import TaskComment, TeamEvent, TeamMessage, TeamTask
from teams_app.selectors import task_as_dict, task_get
from teams_app.services.tasks import (task_ask_user, task_attach, task_claim, task_comment, task_complete, task_create,
                                      task_fail, task_progress, task_review)
from teams_app.services.teams import team_create
from tests.factories import make_agent

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("counters_reread_only_after_a_change")]  # counts queries

# session, user, user + group permissions, team, members, the members' hosted runs, active cards + their blockers,
# finished cards + theirs
BOARD_QUERIES = 11
HOSTILE = '<script>window.__pwned = 1</script><img src=x onerror="alert(1)">'


# --- set-up -----------------------------------------------------------------------------------------------------

@pytest.fixture
def crew():
    """A team "alpha" with a lead and two members."""
    lead, ana, bob = make_agent(key="lead-1"), make_agent(key="ana"), make_agent(key="bob")
    team = team_create(actor=Actor.system("test"), name="alpha", lead=lead, members=[(ana, "member"), (bob, "member")])
    return {"team": team, "lead": lead, "ana": ana, "bob": bob}


def _staff(django_user_model, username: str, *perms: str, **flags):
    user = django_user_model.objects.create_user(username, password="pw-board-123", is_staff=True, **flags)
    for codename in perms:
        user.user_permissions.add(Permission.objects.get(content_type__app_label="teams_app", codename=codename))
    return user


@pytest.fixture
def person(django_user_model):
    """A staff user allowed to view and steer boards (not a superuser: the permissions are what count)."""
    return _staff(django_user_model, "grace", "view_teamtask", "change_teamtask")


@pytest.fixture
def browser(person):
    client = Client()
    client.force_login(person)
    return client


def lead_actor(crew) -> Actor:
    return Actor.for_agent(crew["lead"])


def new_task(crew, subject: str, **kwargs) -> TeamTask:
    return task_create(actor=lead_actor(crew), team=crew["team"], subject=subject, **kwargs)


def claimed(crew, subject: str, who: str = "ana", **kwargs) -> TeamTask:
    task = new_task(crew, subject, **kwargs)
    return task_claim(actor=Actor.for_agent(crew[who]), team=crew["team"], task=task)


def board_url(crew, **params) -> str:
    url = reverse("teams:board", args=[crew["team"].pk])
    return url + ("?" + "&".join(f"{k}={v}" for k, v in params.items()) if params else "")


def task_url(crew, identifier: str) -> str:
    return reverse("teams:task", args=[crew["team"].pk, identifier])


def action_url(crew, identifier: str, action: str) -> str:
    return reverse("teams:task_action", args=[crew["team"].pk, identifier, action])


def _walk(node):
    if isinstance(node, Element):
        yield node
        for child in node.children:
            yield from _walk(child)


def columns(response) -> dict[str, list[str]]:
    """{status: [card ids, in page order]} read from the rendered board."""
    found = {}
    for el in _walk(parse_html(response.content.decode())):
        attrs = dict(el.attributes)
        if el.name == "div" and str(attrs.get("id", "")).startswith("cards-"):
            found[attrs["id"][len("cards-"):]] = [dict(c.attributes)["data-id"] for c in _walk(el)
                                                  if c.name == "article"]
    return found


def messages_of(response) -> list[str]:
    return [str(m) for m in response.context["messages"]] if response.context else []


def follow_post(client, url, data=None):
    return client.post(url, data or {}, follow=True)


def person_events(task: TeamTask, event_type: str) -> list[TeamEvent]:
    return list(TeamEvent.objects.filter(task=task, event_type=event_type, actor="user:grace"))


# --- who may see it ---------------------------------------------------------------------------------------------

def test_anonymous_visitors_are_sent_to_the_login_page(crew):
    response = Client().get(board_url(crew))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("admin:login"))


def test_a_logged_in_person_who_is_not_staff_is_refused(crew, django_user_model):
    user = django_user_model.objects.create_user("visitor", password="pw-visitor-1")
    client = Client()
    client.force_login(user)
    for url in (board_url(crew), reverse("teams:index"), task_url(crew, new_task(crew, "secret plan").identifier)):
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith(reverse("admin:login"))
    response = client.post(action_url(crew, "T-001", "cancel"), {"reason": "x"})
    assert response.status_code == 302
    assert TeamTask.objects.get(team=crew["team"], number=1).status == "pending"


def test_staff_without_the_board_permissions_cannot_see_or_steer_it(crew, django_user_model):
    new_task(crew, "needs doing")
    viewer = Client()
    viewer.force_login(_staff(django_user_model, "viewer", "view_teamtask"))
    nobody = Client()
    nobody.force_login(_staff(django_user_model, "nobody"))
    assert nobody.get(board_url(crew)).status_code == 403
    assert viewer.get(board_url(crew)).status_code == 200
    page = viewer.get(task_url(crew, "T-001"))
    assert page.status_code == 200 and b"action-cancel" not in page.content  # no buttons for a viewer
    assert viewer.post(action_url(crew, "T-001", "cancel"), {"reason": "x"}).status_code == 403
    assert TeamTask.objects.get(team=crew["team"], number=1).status == "pending"


def test_the_admin_index_links_to_the_team_boards_and_the_index_lists_every_team(crew, browser):
    new_task(crew, "open one")
    asking = claimed(crew, "has a question")
    task_ask_user(actor=Actor.for_agent(crew["ana"]), task=asking, question="which one?")
    new_task(crew, "waits", blocked_by=["T-001"])
    done = claimed(crew, "finished", who="bob")
    task_complete(actor=Actor.for_agent(crew["bob"]), task=done, result="ok")
    admin_index = browser.get(reverse("admin:index"))
    assert reverse("teams:index").encode() in admin_index.content
    index = browser.get(reverse("teams:index"))
    assert index.status_code == 200
    assert board_url(crew).encode() in index.content and b"alpha" in index.content and b"lead-1" in index.content
    team = next(iter(index.context["teams"]))
    assert (team.members_count, team.open_tasks, team.needs_person) == (3, 3, 2)  # the question and the blocked one


# --- the board --------------------------------------------------------------------------------------------------

def test_the_board_shows_each_task_in_the_column_of_its_status(crew, browser):
    new_task(crew, "write the outline")  # T-001 pending
    claimed(crew, "draft chapter one")  # T-002 in progress
    new_task(crew, "edit the draft", blocked_by=["T-002"])  # T-003 blocked
    failed = claimed(crew, "fetch sources", who="bob")  # T-004 failed
    task_fail(actor=Actor.for_agent(crew["bob"]), task=failed, reason="site down")
    response = browser.get(board_url(crew))
    assert response.status_code == 200
    cols = columns(response)
    assert list(cols) == ["pending", "in_progress", "blocked", "in_review", "stale", "completed", "failed", "cancelled"]
    assert cols["pending"] == ["T-001"] and cols["in_progress"] == ["T-002"] and cols["blocked"] == ["T-003"]
    assert cols["failed"] == ["T-004"] and cols["completed"] == []
    html = response.content.decode()
    assert "draft chapter one" in html and "blocked by <span" in html and 'id="ws-status"' in html


def test_pending_cards_are_ordered_by_priority_then_number(crew, browser):
    new_task(crew, "low")
    new_task(crew, "high", priority=5)
    new_task(crew, "also low")
    assert columns(browser.get(board_url(crew)))["pending"] == ["T-002", "T-001", "T-003"]


def test_a_card_shows_owner_progress_and_an_open_question(crew, browser):
    task = claimed(crew, "measure things")
    task_progress(actor=Actor.for_agent(crew["ana"]), task=task, percent=40, step="halfway-ish")
    task_ask_user(actor=Actor.for_agent(crew["ana"]), task=task_get(crew["team"], "T-001"), question="metric or imperial?")
    html = browser.get(board_url(crew)).content.decode()
    card = html[html.index('data-id="T-001"'):]
    card = card[:card.index("</article>")]
    assert "ana" in card and 'value="40"' in card and "halfway-ish" in card
    assert ">? question<" in card and " hidden>? question" not in card


def test_filters_by_owner_by_full_text_search_and_terminal_columns_open_on_request(crew, browser):
    claimed(crew, "alpha report", who="ana", description="quarterly numbers")
    claimed(crew, "beta report", who="bob", description="weekly gossip")
    done = claimed(crew, "gamma archive", who="bob")
    task_complete(actor=Actor.for_agent(crew["bob"]), task=done, result="archived")
    by_owner = columns(browser.get(board_url(crew, owner="bob")))
    assert by_owner["in_progress"] == ["T-002"] and by_owner["completed"] == ["T-003"]
    searched = columns(browser.get(board_url(crew, q="quarterly")))
    assert searched["in_progress"] == ["T-001"] and searched["completed"] == []
    closed = browser.get(board_url(crew)).content.decode()
    opened = browser.get(board_url(crew, terminal="1")).content.decode()
    assert 'id="col-completed" data-status="completed">' in closed
    assert 'id="col-completed" data-status="completed" open>' in opened


def test_an_owner_filter_naming_no_member_shows_everyone_with_a_warning(crew, browser):
    new_task(crew, "anything")
    response = browser.get(board_url(crew, owner="<b>stranger</b>"))
    assert columns(response)["pending"] == ["T-001"]
    assert any("stranger" in m and "not a member" in m for m in messages_of(response))
    assert b"<b>stranger</b>" not in response.content


def test_a_missing_team_or_task_sends_the_person_back_with_a_message(crew, browser):
    gone = browser.get(reverse("teams:board", args=[999999]), follow=True)
    assert gone.redirect_chain[-1][0] == reverse("teams:index")
    assert any("999999" in m for m in messages_of(gone))
    missing = browser.get(task_url(crew, "T-404"), follow=True)
    assert missing.redirect_chain[-1][0] == board_url(crew)
    assert messages_of(missing)


def test_the_board_costs_the_same_number_of_queries_for_3_or_30_tasks(crew, browser, django_assert_num_queries):
    def fill(count):  # pending, in progress and failed tasks (owned by two agents), and one waiting for two
        for i in range(count):
            task = claimed(crew, f"task {i}", who="ana" if i % 2 else "bob") if i % 3 else new_task(crew, f"task {i}")
            if i % 3 == 1:
                task_fail(actor=Actor.for_agent(task.owner), task=task, reason="nope")
        new_task(crew, "waits", blocked_by=[f"T-{n:03d}" for n in (1, 3)])

    fill(3)
    browser.get(board_url(crew))  # warm the session and the content types
    with django_assert_num_queries(BOARD_QUERIES):
        small = browser.get(board_url(crew))
    fill(30)
    with django_assert_num_queries(BOARD_QUERIES):
        large = browser.get(board_url(crew))
    assert sum(map(len, columns(small).values())) == 4 and sum(map(len, columns(large).values())) == 35


# --- the task page ----------------------------------------------------------------------------------------------

def test_the_task_page_shows_description_result_comments_attachments_events_and_dependencies(crew, browser):
    first = claimed(crew, "collect data", description="from the three sensors")
    task_comment(actor=Actor.for_agent(crew["ana"]), task=first, content="sensor two is flaky")
    task_attach(actor=Actor.for_agent(crew["ana"]), task=first, path="data/readings.csv", size=1234, note="raw")
    new_task(crew, "analyse data", blocked_by=["T-001"])
    task_complete(actor=Actor.for_agent(crew["ana"]), task=task_get(crew["team"], "T-001"), result="42 readings")
    html = browser.get(task_url(crew, "T-001")).content.decode()
    for text in ("from the three sensors", "42 readings", "sensor two is flaky", "data/readings.csv", "1234",
                 "agent:ana", "claimed", "completed", "commented"):
        assert text in html, text
    assert task_url(crew, "T-002") in html[html.index('id="task-blocks"'):]  # what it blocks
    second = browser.get(task_url(crew, "T-002")).content.decode()
    assert task_url(crew, "T-001") in second[second.index('id="task-blocked-by"'):]  # what it waited for
    lower = browser.get(task_url(crew, "t-1"))  # identifiers are read as the selector reads them
    assert lower.status_code == 200 and "collect data" in lower.content.decode()


def test_the_task_page_offers_only_the_actions_its_status_allows(crew, browser):
    new_task(crew, "pending one")
    failed = claimed(crew, "failing one")
    task_fail(actor=Actor.for_agent(crew["ana"]), task=failed, reason="broken")
    pending = browser.get(task_url(crew, "T-001")).content.decode()
    assert "action-cancel" in pending and "action-retry" not in pending and "action-unblock" not in pending
    retryable = browser.get(task_url(crew, "T-002")).content.decode()
    assert "action-retry" in retryable and "action-cancel" not in retryable


# --- recovery actions -------------------------------------------------------------------------------------------

def test_cancel_records_the_person_and_the_reason(crew, browser):
    task = claimed(crew, "doomed")
    response = follow_post(browser, action_url(crew, "T-001", "cancel"), {"reason": "no longer needed"})
    assert response.redirect_chain[-1][0] == task_url(crew, "T-001")
    assert any("cancelled" in m for m in messages_of(response))
    task.refresh_from_db()
    assert task.status == "cancelled"
    assert len(person_events(task, "cancelled")) == 1


def test_retry_puts_a_failed_task_back_to_pending_and_can_return_to_the_board(crew, browser):
    task = claimed(crew, "flaky")
    task_fail(actor=Actor.for_agent(crew["ana"]), task=task, reason="timeout")
    response = follow_post(browser, action_url(crew, "T-001", "retry"), {"back": "board"})
    assert response.redirect_chain[-1][0] == board_url(crew)
    assert columns(response)["pending"] == ["T-001"]
    task.refresh_from_db()
    assert task.status == "pending" and len(person_events(task, "retried")) == 1


def test_retry_works_on_a_completed_task_too(crew, browser):
    task = claimed(crew, "done too early")
    task_complete(actor=Actor.for_agent(crew["ana"]), task=task, result="half")
    follow_post(browser, action_url(crew, "T-001", "retry"))
    task.refresh_from_db()
    assert task.status == "pending" and person_events(task, "retried")


def test_reassign_hands_the_task_to_another_member(crew, browser):
    task = new_task(crew, "needs an owner", assignee=crew["ana"])
    response = follow_post(browser, action_url(crew, "T-001", "reassign"), {"assignee": "bob"})
    assert any("reassigned" in m for m in messages_of(response))
    task.refresh_from_db()
    assert task.owner == crew["bob"] and person_events(task, "assigned")


def test_reassign_to_an_agent_outside_the_team_is_refused_with_a_message(crew, browser):
    outsider = make_agent(key="outsider")
    task = new_task(crew, "stays put", assignee=crew["ana"])
    response = follow_post(browser, action_url(crew, "T-001", "reassign"), {"assignee": outsider.key})
    assert response.status_code == 200 and any("assignee" in m for m in messages_of(response))
    task.refresh_from_db()
    assert task.owner == crew["ana"] and not person_events(task, "assigned")


def test_unblock_by_hand_releases_a_blocked_task(crew, browser):
    claimed(crew, "slow blocker")
    task = new_task(crew, "waiting", blocked_by=["T-001"])
    assert task.status == "blocked"
    follow_post(browser, action_url(crew, "T-002", "unblock"))
    task.refresh_from_db()
    assert task.status == "pending" and person_events(task, "unblocked")


def test_answering_a_question_clears_it_and_tells_the_owner(crew, browser):
    task = claimed(crew, "unclear")
    task_ask_user(actor=Actor.for_agent(crew["ana"]), task=task, question="which format?")
    assert b"which format?" in browser.get(task_url(crew, "T-001")).content
    follow_post(browser, action_url(crew, "T-001", "answer"), {"answer": "CSV please"})
    task.refresh_from_db()
    assert task.question == "" and person_events(task, "answered")
    assert TeamMessage.objects.filter(recipient=crew["ana"], text__contains="CSV please").exists()


def test_approve_and_reject_decide_a_task_in_review(crew, browser):
    good = claimed(crew, "good work")
    task_review(actor=Actor.for_agent(crew["ana"]), task=good, result="all done")
    bad = claimed(crew, "sloppy work", who="bob")
    task_review(actor=Actor.for_agent(crew["bob"]), task=bad, result="meh")
    follow_post(browser, action_url(crew, "T-001", "approve"), {"note": "nice"})
    follow_post(browser, action_url(crew, "T-002", "reject"), {"feedback": "add the tests"})
    good.refresh_from_db()
    bad.refresh_from_db()
    assert good.status == "completed" and person_events(good, "approved")
    assert bad.status == "in_progress" and person_events(bad, "rejected")
    assert bad.comments.filter(content__contains="add the tests").exists()


def test_reject_without_feedback_is_refused_before_the_service(crew, browser):
    task = claimed(crew, "in review")
    task_review(actor=Actor.for_agent(crew["ana"]), task=task)
    response = follow_post(browser, action_url(crew, "T-001", "reject"), {"feedback": ""})
    assert any("feedback" in m and "required" in m for m in messages_of(response))
    task.refresh_from_db()
    assert task.status == "in_review"


def test_a_person_comments_on_a_task(crew, browser):
    task = new_task(crew, "discuss")
    follow_post(browser, action_url(crew, "T-001", "comment"), {"content": "please split this up"})
    comment = task.comments.get()
    assert comment.author == "user:grace" and comment.content == "please split this up"
    assert person_events(task, "commented")


def test_an_illegal_transition_is_shown_as_an_error_message_never_a_500(crew, browser):
    task = new_task(crew, "still pending")
    response = follow_post(browser, action_url(crew, "T-001", "retry"))
    assert response.status_code == 200
    errors = [m for m in response.context["messages"] if m.level_tag == "error"]
    assert errors and "T-001" in str(errors[0])
    task.refresh_from_db()
    assert task.status == "pending" and not TeamEvent.objects.filter(task=task, event_type="retried").exists()
    approve = follow_post(browser, action_url(crew, "T-001", "approve"))
    assert approve.status_code == 200 and [m for m in approve.context["messages"] if m.level_tag == "error"]


def test_unknown_actions_and_tasks_and_oversized_input_get_messages(crew, browser):
    new_task(crew, "target")
    unknown = follow_post(browser, action_url(crew, "T-001", "delete"))
    assert any("Unknown action" in m for m in messages_of(unknown))
    missing = follow_post(browser, action_url(crew, "T-999", "retry"))
    assert missing.redirect_chain[-1][0] == board_url(crew) and messages_of(missing)
    huge = follow_post(browser, action_url(crew, "T-001", "comment"), {"content": "x" * 10_001})
    assert any("content" in m for m in messages_of(huge))
    assert not TaskComment.objects.filter(task__team=crew["team"]).exists()


def test_actions_need_a_post_with_a_csrf_token(crew, person):
    new_task(crew, "guarded")
    client = Client(enforce_csrf_checks=True)
    client.force_login(person)
    assert client.get(action_url(crew, "T-001", "cancel")).status_code == 405
    assert client.post(action_url(crew, "T-001", "cancel"), {"reason": "csrf"}).status_code == 403
    assert TeamTask.objects.get(team=crew["team"], number=1).status == "pending"


def test_the_task_page_forms_carry_the_csrf_token(crew, person):
    new_task(crew, "with forms")
    client = Client(enforce_csrf_checks=True)
    client.force_login(person)
    page = client.get(task_url(crew, "T-001"))
    token = page.context["csrf_token"]
    assert f'value="{token}"' in page.content.decode()
    response = client.post(action_url(crew, "T-001", "cancel"), {"reason": "ok", "csrfmiddlewaretoken": str(token)})
    assert response.status_code == 302
    assert TeamTask.objects.get(team=crew["team"], number=1).status == "cancelled"


# --- hostile text -----------------------------------------------------------------------------------------------

def test_agent_written_html_is_shown_as_text_on_the_board_and_the_task_page(crew, browser):
    task = claimed(crew, HOSTILE, description=HOSTILE)
    task_comment(actor=Actor.for_agent(crew["ana"]), task=task, content=HOSTILE)
    task_ask_user(actor=Actor.for_agent(crew["ana"]), task=task_get(crew["team"], "T-001"), question=HOSTILE)
    for url in (board_url(crew), task_url(crew, "T-001"), board_url(crew, q="<script>")):
        html = browser.get(url).content.decode()
        assert "<script>window.__pwned" not in html and "<img src=x" not in html
    page = browser.get(task_url(crew, "T-001")).content.decode()
    assert page.count("&lt;script&gt;window.__pwned = 1&lt;/script&gt;") >= 4  # title, description, comment, question


def test_each_card_carries_the_version_live_events_are_compared_with(crew, browser):
    """The page drops an event older than what a card shows (events from several processes can arrive out of
    order): the card's version must be the task's updated_at exactly as an event's JSON carries it."""
    claimed(crew, "versioned")
    encoded = json.loads(json.dumps(task_as_dict(task_get(crew["team"], "T-001")), cls=DjangoJSONEncoder))
    from_event = datetime.fromisoformat(encoded["updated_at"].replace("Z", "+00:00"))
    millis = int(from_event.timestamp()) * 1000 + from_event.microsecond // 1000
    assert f'data-id="T-001" data-priority="0" data-number="1" data-status="in_progress" data-version="{millis}"' in (
        browser.get(board_url(crew)).content.decode())
