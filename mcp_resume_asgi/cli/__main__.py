"""`python -m mcp_resume_asgi.cli`: the `mcp-resume` command."""

import sys

from mcp_resume_asgi.cli import main

sys.exit(main())
