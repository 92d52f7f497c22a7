"""graphsignal-server: the Signals API, self-hosted. Sidecars started with
GRAPHSIGNAL_API_KEY and GRAPHSIGNAL_API_BASE pointing here upload to it;
agents read the fleet back with the same keys. app (the Werkzeug app),
db (SQLite storage), ingest (body checks), windows (?window=N)."""
