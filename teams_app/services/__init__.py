"""Team services: the only writers of teams_app's models (docs/teams.md). Every write is `@transaction.atomic`;
every status change is a conditional UPDATE with a row-count check; events go out after commit."""
