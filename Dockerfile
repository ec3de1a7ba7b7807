# teleop server image: the simulator by default; mount your own profile for hardware.
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /app

# Install dependencies first so code edits do not rebuild this layer.
# The pins of requirements-run.lock (hashes checked; `make lock` writes it), then the project without resolving again.
COPY pyproject.toml README.md requirements-run.lock ./
RUN pip install --require-hashes -r requirements-run.lock \
    && mkdir -p server drivers sim robotics \
    && touch server/__init__.py drivers/__init__.py sim/__init__.py robotics/__init__.py \
    && pip install --no-deps --no-build-isolation -e . && rm -rf server drivers sim robotics

COPY server ./server
COPY drivers ./drivers
COPY sim ./sim
COPY robotics ./robotics
COPY web ./web
COPY config ./config

EXPOSE 8080
# The control loop asks for SCHED_FIFO; grant it with `cap_add: [SYS_NICE]` (see docker-compose.yml).
# /login is public (the rest needs a login): it says the gateway answers.
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
    CMD python -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8080/login', timeout=2).status == 200 else 1)"
STOPSIGNAL SIGTERM
# Listening on 0.0.0.0 needs a user (state/users.json; mount state/ as a volume and run
# `python -m server users add NAME --role admin` in the container first): docs/deploy.md.
CMD ["python", "-m", "server", "--config", "config/rover-sim.toml", "--host", "0.0.0.0", "--port", "8080"]
