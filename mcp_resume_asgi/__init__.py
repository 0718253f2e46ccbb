"""mcp-resume-asgi."""
