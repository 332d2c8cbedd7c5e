"""The APIs and versions a broker serves: Kafka 2.8's ranges, from where v2 record batches start."""
from __future__ import annotations

from actors.broker.network.api_versions import API_VERSIONS, api_versions_response, supported
from coordination.errors import Errors


def test_kafka_28_versions_from_where_v2_batches_start():
    assert API_VERSIONS[0][1:] == (3, 9) and API_VERSIONS[1][1:] == (4, 12)  # Produce; Fetch capped at 12
    assert API_VERSIONS[18][1:] == (0, 3) and API_VERSIONS[3][1:] == (0, 11)  # ApiVersions; Metadata
    assert supported(1, 12) and not supported(1, 13) and not supported(0, 2) and not supported(57, 0)


def test_the_group_apis_at_kafka_28s_versions():
    assert {key: API_VERSIONS[key][1:] for key in (8, 9, 10, 11, 12, 13, 14, 15, 16, 42)} == {
        8: (2, 8), 9: (1, 7), 10: (0, 3), 11: (0, 7), 12: (0, 4), 13: (0, 4), 14: (0, 5), 15: (0, 5), 16: (0, 4),
        42: (0, 2)}


def test_every_api_is_listed_and_each_request_class_knows_its_versions():
    listed = {k.api_key: (k.min_version, k.max_version) for k in api_versions_response().api_keys}
    assert listed == {key: (low, high) for key, (_, low, high) in API_VERSIONS.items()}
    for key, (cls, low, high) in API_VERSIONS.items():
        assert cls.API_KEY == key and cls.min_version <= low and high <= cls.max_version, cls.__name__
    assert [k.api_key for k in api_versions_response(Errors.UNSUPPORTED_VERSION).api_keys] == [18]
