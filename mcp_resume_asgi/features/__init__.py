"""The feature layers: thin ASGI middleware in front of `ResumeMiddleware` that add to what it does.

`seam.py` is what every layer is (`FeatureMiddleware`: it registers itself in the scope, and
the HTTP front asks it about each request); `resumable_requests.py` is SEP-975's resumable
requests, `resume_tokens.py` the resume-token layer. The Tasks layer (`tasks/`) and the REST
face (`rest/`) are layers of the same kind, each a package of its own.
"""
