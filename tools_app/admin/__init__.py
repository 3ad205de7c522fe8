"""Admin screens for tools_app, one module per area (registered on import)."""
from tools_app.admin import agents  # noqa: F401
from tools_app.admin import policy  # noqa: F401,E402
from tools_app.admin import approvals  # noqa: F401,E402
from tools_app.admin import custom_tools  # noqa: F401,E402
from tools_app.admin import cli_binaries  # noqa: F401,E402
from tools_app.admin import context_files  # noqa: F401,E402
from tools_app.admin import memory  # noqa: F401,E402
from tools_app.admin import skills  # noqa: F401,E402
from tools_app.admin import notifications  # noqa: F401,E402
from tools_app.admin import oauth  # noqa: F401,E402
