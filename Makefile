# Two commands do everything on a fresh Debian machine:
#   make demo   - set up, then run the main job on an embedded ZooKeeper + local Ray
#   make test   - set up, then run the test suite (real ZooKeeper, real Ray)
# Set-up: a virtualenv in .venv with the project, Debian's zookeeper package, a Java check, Debian's chromium,
# kafkajs (Debian's nodejs and npm, kafkajs from the npm registry into tests/kafkajs), and what `kray hosts`
# needs (iproute2, iptables, openssh-server, rsync).

PYTHON ?= python3
VENV   := .venv
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
STAMP  := $(VENV)/.installed
TOOLS  := .venv-tools

.PHONY: setup demo test test-unit bench clean system-packages

KAFKAJS := tests/kafkajs/node_modules/.installed

setup: system-packages $(STAMP) $(TOOLS)/.installed $(KAFKAJS)

# kafkajs, a Kafka client in another language that the tests drive, at the version package-lock.json names
$(KAFKAJS): tests/kafkajs/package.json tests/kafkajs/package-lock.json
	cd tests/kafkajs && npm ci --no-audit --no-fund --loglevel=error
	node -e "require('./tests/kafkajs/node_modules/kafkajs')"
	touch $(KAFKAJS)

# Kafka tools the tests drive that cannot share the project's venv: Yelp's kafka-utils pins kafka-python < 1.5
$(TOOLS)/.installed:
	test -x $(TOOLS)/bin/python || $(PYTHON) -m venv $(TOOLS)
	$(TOOLS)/bin/pip install -q kafka-utils==4.1.0 2>&1 | grep -v "^WARNING: Location" || true
	$(TOOLS)/bin/kafka-check --help >/dev/null
	touch $(TOOLS)/.installed

system-packages:
	@command -v java >/dev/null || { echo "Java not found: installing OpenJDK 17"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq openjdk-17-jre-headless; }
	@java -version 2>&1 | head -1
	@test -f /usr/share/java/zookeeper.jar || { echo "Installing Debian's zookeeper package"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq zookeeper; }
	@command -v kcat >/dev/null || { echo "Installing Debian's kcat (a Kafka client the tests drive)"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq kcat; }
	@command -v chromium >/dev/null || { echo "Installing Debian's chromium (the run timeline page's browser tests)"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium; }
	@command -v node >/dev/null && command -v npm >/dev/null || { echo "Installing Debian's nodejs and npm (kafkajs)"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq nodejs npm; }
	@command -v ip >/dev/null && command -v iptables >/dev/null && test -x /usr/sbin/sshd && command -v rsync >/dev/null \
	  && command -v ping >/dev/null \
	  || { echo "Installing Debian's iproute2, iptables, openssh-server, rsync and ping (kray hosts, ray up on them)"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq \
	  iproute2 iptables openssh-server openssh-client rsync iputils-ping; }

$(STAMP): pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q -e . 2>&1 | grep -v "^WARNING: Location" || true
	$(VENV)/bin/python -c "import ray, kazoo, pyspark, raydp, pydantic, pytest, matplotlib, kafka, confluent_kafka, crc32c"
	touch $(STAMP)

demo: setup
	$(VENV)/bin/python -m jobs.sweep --runs-dir runs

test: setup
	$(VENV)/bin/python -m pytest -q

test-unit: setup
	$(VENV)/bin/python -m pytest -q tests/unit

bench: setup
	$(VENV)/bin/python -m benchmarks.bench_controller

clean:
	rm -rf $(VENV) $(TOOLS) *.egg-info tests/kafkajs/node_modules
