"""Spark on the Ray cluster through RayDP: executors are Ray actors beside the brokers.

Sized by default for a 2-core machine (one executor, one core, 500 MB); a real cluster passes
more. Java 17 closes the JDK internals Spark 3.5 reaches into, so the driver, the executors and
RayDP's application master are all started with the `--add-opens` Spark's own launcher uses.
"""
from __future__ import annotations

import os
import sys
import uuid
from contextlib import contextmanager

import ray

from pydantic import BaseModel, ConfigDict, Field

from actors.runtime import poll

STOP_TIMEOUT_S = 60

# What Spark 3.5's launcher adds for Java 17 (JavaModuleOptions), for every JVM RayDP starts.
JAVA_17_OPTIONS = " ".join(f"--add-opens=java.base/{p}=ALL-UNNAMED" for p in (
    "java.lang", "java.lang.invoke", "java.lang.reflect", "java.io", "java.net", "java.nio", "java.util",
    "java.util.concurrent", "java.util.concurrent.atomic", "sun.nio.ch", "sun.nio.cs", "sun.security.action",
    "sun.util.calendar")) + " -Djdk.reflect.useDirectMethodHandle=false -Dio.netty.tryReflectionSetAccessible=true"


# A JVM that compiles with C1 only: Spark's many small jobs over a run's tables are done before C2 would
# pay off (a small analysis's first run, most of it the cold JVM's, 43 -> 32 s here), but a large one
# computes slower with it (BENCHMARKS.md, "The analysis's JVM")
QUICK_JVM = "-XX:TieredStopAtLevel=1"


class SparkSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    app_name: str = "kray-analysis"
    executors: int = Field(1, ge=1)
    executor_cores: int = Field(1, ge=1)
    executor_memory: str = "500M"
    driver_memory: str = "1g"
    shuffle_partitions: int = Field(4, ge=1, description="spark.sql.shuffle.partitions: few, for small tables")
    configs: dict[str, str] = Field(default_factory=dict, description="extra Spark settings")
    java_options: str = Field("", description="more JVM options for the driver and the executors")

    def spark_configs(self) -> dict[str, str]:
        java = f"{JAVA_17_OPTIONS} {self.java_options}".strip()
        return {"spark.driver.extraJavaOptions": java,
                "spark.executor.extraJavaOptions": java,
                "spark.ray.raydp_app_master.extraJavaOptions": JAVA_17_OPTIONS,
                "spark.driver.memory": self.driver_memory,
                "spark.sql.shuffle.partitions": str(self.shuffle_partitions),
                "spark.ui.enabled": "false",
                "spark.ui.showConsoleProgress": "false",
                "spark.sql.session.timeZone": "UTC",
                **self.configs}


def add_spark_arguments(parser) -> None:
    """The Spark sizing options every job that starts Spark takes (defaults fit a 2-core machine)."""
    defaults = SparkSettings()
    parser.add_argument("--executors", type=int, default=defaults.executors, help="Spark executors (Ray actors)")
    parser.add_argument("--executor-cores", type=int, default=defaults.executor_cores)
    parser.add_argument("--executor-memory", default=defaults.executor_memory)
    parser.add_argument("--java-options", default=defaults.java_options, metavar="OPTIONS",
                        help=f"more JVM options for Spark's driver and executors, given with '=' as they start with "
                             f"'-': --java-options={QUICK_JVM} (C1 only) finishes a small analysis sooner "
                             "(BENCHMARKS.md)")


def settings_from(args) -> SparkSettings:
    return SparkSettings(executors=args.executors, executor_cores=args.executor_cores,
                         executor_memory=args.executor_memory, java_options=args.java_options)

EXECUTOR_RESOURCE = "spark.ray.raydp_spark_executor.actor.resource."


@contextmanager
def spark_on_ray(settings: SparkSettings | None = None):
    """A SparkSession whose executors run as Ray actors on the current Ray cluster; stopped on exit."""
    import raydp

    settings = settings or SparkSettings()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    before = set(ray.util.list_named_actors())
    # RayDP names its master actor after the app; a previous session's may still be stopping
    app = f"{settings.app_name}-{uuid.uuid4().hex[:6]}"
    # the executors on this node (Ray's node:<address> resource): the run directories they read are on its disk
    here = {f"{EXECUTOR_RESOURCE}node:{ray.util.get_node_ip_address()}": "0.01"}
    spark = raydp.init_spark(app, num_executors=settings.executors,
                             executor_cores=settings.executor_cores, executor_memory=settings.executor_memory,
                             configs={**settings.spark_configs(), **here})
    spark.sparkContext.setLogLevel("ERROR")
    try:
        yield spark
    finally:
        raydp.stop_spark()
        # RayDP stops its actors without waiting: wait, so that the next session can take their names
        poll(lambda: not (set(ray.util.list_named_actors()) - before), STOP_TIMEOUT_S,
             "RayDP's actors to stop", tolerate=())


def spark_hosts(spark) -> set[str]:
    """The hosts of this session's driver and executors."""
    status = spark.sparkContext._jsc.sc().getExecutorMemoryStatus()  # "host:port" -> memory, for each
    keys, hosts = status.keys().iterator(), set()
    while keys.hasNext():
        hosts.add(keys.next().rsplit(":", 1)[0])
    return hosts


def runs_on_ray(spark) -> bool:
    """Whether this session is RayDP's: its master URL is Ray's and its master is a Ray actor."""
    app = spark.sparkContext.appName
    return spark.sparkContext.master.startswith("ray://") and app + "_SPARK_MASTER" in ray.util.list_named_actors()
