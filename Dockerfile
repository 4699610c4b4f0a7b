# The Ultraroute gateway (and the simulated providers, same image). One worker process by default;
# `serve --workers N|auto` runs more, each a replica (docker-compose.yml runs two containers of two).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
COPY pyproject.toml README.md ./
COPY gateway ./gateway
# The package's data files (the built-in named policies, dashboard/index.html, bench/prompts.yaml) are
# package data: installed with the code. `pip install .` resolves pyproject.toml's bounds, the same as
# `make install` (aiohttp's matter: gateway/upstreams/aiohttp_tuned.py leans on its internals).
RUN pip install . \
    && useradd --system --uid 10001 --no-create-home ultraroute

USER ultraroute
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=2)"]
# Named policies: /etc/ultraroute/policies/ if mounted beside the catalogue, else the built-in set.
CMD ["ultraroute", "serve", "--config", "/etc/ultraroute/providers.yaml", \
     "--host", "0.0.0.0", "--port", "8080", "--log-level", "info"]
