"""The ASGI front (issue 21 step 6): modules move here from the package root."""
