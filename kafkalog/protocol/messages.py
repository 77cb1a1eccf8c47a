"""Request and response tables of the Kafka APIs ``kafkalog serve`` answers, and the one table
of the APIs and versions it supports.

Written from the facts of Kafka's JSON message definitions (names, types, versions,
nullability, tags, defaults) in ``kafkalog.internal.schema``'s table syntax, for the versions
``APIS`` supports only; ``scripts/check_schemas.py`` compares them with the definitions, field by
field and version by version (checked against Kafka at commit 1eb7644349cb: no difference).
An entry is ``(API name, flexible versions, request fields, response fields)``; the request
and response of an API share their versions, as in Kafka.

The version ranges: as wide as the clients negotiate (librdkafka 2.x, kafka-python 2.x/3.x,
aiokafka 0.14 pick the highest version both sides have, old kafka-python infers the broker's
version from these maxima), except where a version would oblige the server to do what it
cannot: Fetch from 4 (older versions want batches down-converted to message format 0/1, which
Kafka 4 dropped too) up to 12 (13+ name topics by id only), ListOffsets from 1 (v0 returns
lists of segment offsets) up to 7 (8+ ask for local and tiered log start offsets).
The write APIs (``kafkalog.protocol.writes``) are there so that a client that sends one gets
the read-only error and not a closed connection.
"""
from __future__ import annotations

from kafkalog.errors import ProtocolError
from kafkalog.internal.schema import Message, messages
from kafkalog.protocol.writes import WRITES

# api key -> (name, lowest version, highest version): what ApiVersions answers
APIS: dict[int, tuple[str, int, int]] = {
    0: ("Produce", 0, 11),
    1: ("Fetch", 4, 12),
    2: ("ListOffsets", 1, 7),
    3: ("Metadata", 0, 12),
    8: ("OffsetCommit", 0, 9),
    9: ("OffsetFetch", 0, 9),
    10: ("FindCoordinator", 0, 6),
    11: ("JoinGroup", 0, 9),
    12: ("Heartbeat", 0, 4),
    13: ("LeaveGroup", 0, 5),
    14: ("SyncGroup", 0, 5),
    18: ("ApiVersions", 0, 4),
    19: ("CreateTopics", 0, 7),
    20: ("DeleteTopics", 0, 6),
    21: ("DeleteRecords", 0, 2),
    22: ("InitProducerId", 0, 5),
    32: ("DescribeConfigs", 0, 4),
    60: ("DescribeCluster", 0, 1),
}

_READS = [
    ("ApiVersions", "3+", """
        clientSoftwareName string 3+
        clientSoftwareVersion string 3+
    """, """
        errorCode int16
        apiKeys []ApiVersion
          apiKey int16
          minVersion int16
          maxVersion int16
        throttleTimeMs int32 1+
        supportedFeatures []SupportedFeatureKey 3+ tag0
          name string 3+
          minVersion int16 3+
          maxVersion int16 3+
        finalizedFeaturesEpoch int64 3+ tag1 =-1
        finalizedFeatures []FinalizedFeatureKey 3+ tag2
          name string 3+
          maxVersionLevel int16 3+
          minVersionLevel int16 3+
        zkMigrationReady bool 3+ tag3 =false
    """),
    ("Metadata", "9+", """
        topics []MetadataRequestTopic null1+
          topicId uuid 10+
          name string null10+
        allowAutoTopicCreation bool 4+ =true
        includeClusterAuthorizedOperations bool 8-10
        includeTopicAuthorizedOperations bool 8+
    """, """
        throttleTimeMs int32 3+
        brokers []MetadataResponseBroker
          nodeId int32
          host string
          port int32
          rack string? 1+ =null
        clusterId string? 2+ =null
        controllerId int32 1+ =-1
        topics []MetadataResponseTopic
          errorCode int16
          name string null12+
          topicId uuid 10+
          isInternal bool 1+ =false
          partitions []MetadataResponsePartition
            errorCode int16
            partitionIndex int32
            leaderId int32
            leaderEpoch int32 7+ =-1
            replicaNodes []int32
            isrNodes []int32
            offlineReplicas []int32 5+
          topicAuthorizedOperations int32 8+ =-2147483648
        clusterAuthorizedOperations int32 8-10 =-2147483648
    """),
    ("ListOffsets", "6+", """
        replicaId int32
        isolationLevel int8 2+
        topics []ListOffsetsTopic
          name string
          partitions []ListOffsetsPartition
            partitionIndex int32
            currentLeaderEpoch int32 4+ =-1
            timestamp int64
    """, """
        throttleTimeMs int32 2+
        topics []ListOffsetsTopicResponse
          name string
          partitions []ListOffsetsPartitionResponse
            partitionIndex int32
            errorCode int16
            timestamp int64 =-1
            offset int64 =-1
            leaderEpoch int32 4+ =-1
    """),
    ("Fetch", "12+", """
        clusterId string? 12+ tag0 =null
        replicaId int32 =-1
        maxWaitMs int32
        minBytes int32
        maxBytes int32 =0x7fffffff
        isolationLevel int8 =0
        sessionId int32 7+ =0
        sessionEpoch int32 7+ =-1
        topics []FetchTopic
          topic string
          partitions []FetchPartition
            partition int32
            currentLeaderEpoch int32 9+ =-1
            fetchOffset int64
            lastFetchedEpoch int32 12+ =-1
            logStartOffset int64 5+ =-1
            partitionMaxBytes int32
        forgottenTopicsData []ForgottenTopic 7+
          topic string 7-12
          partitions []int32 7+
        rackId string 11+ =""
    """, """
        throttleTimeMs int32
        errorCode int16 7+
        sessionId int32 7+ =0
        responses []FetchableTopicResponse
          topic string
          partitions []PartitionData
            partitionIndex int32
            errorCode int16
            highWatermark int64
            lastStableOffset int64 =-1
            logStartOffset int64 5+ =-1
            divergingEpoch EpochEndOffset 12+ tag0
              epoch int32 12+ =-1
              endOffset int64 12+ =-1
            currentLeader LeaderIdAndEpoch 12+ tag1
              leaderId int32 12+ =-1
              leaderEpoch int32 12+ =-1
            snapshotId SnapshotId 12+ tag2
              endOffset int64 =-1
              epoch int32 =-1
            abortedTransactions []AbortedTransaction?
              producerId int64
              firstOffset int64
            preferredReadReplica int32 11+ =-1
            records records?
    """),
    ("FindCoordinator", "3+", """
        key string 0-3
        keyType int8 1+ =0
        coordinatorKeys []string 4+
    """, """
        throttleTimeMs int32 1+
        errorCode int16 0-3
        errorMessage string? 1-3
        nodeId int32 0-3
        host string 0-3
        port int32 0-3
        coordinators []Coordinator 4+
          key string 4+
          nodeId int32 4+
          host string 4+
          port int32 4+
          errorCode int16 4+
          errorMessage string? 4+
    """),
    ("JoinGroup", "6+", """
        groupId string
        sessionTimeoutMs int32
        rebalanceTimeoutMs int32 1+ =-1
        memberId string
        groupInstanceId string? 5+ =null
        protocolType string
        protocols []JoinGroupRequestProtocol
          name string
          metadata bytes
        reason string? 8+ =null
    """, """
        throttleTimeMs int32 2+
        errorCode int16
        generationId int32 =-1
        protocolType string? 7+ =null
        protocolName string null7+
        leader string
        skipAssignment bool 9+ =false
        memberId string
        members []JoinGroupResponseMember
          memberId string
          groupInstanceId string? 5+ =null
          metadata bytes
    """),
    ("SyncGroup", "4+", """
        groupId string
        generationId int32
        memberId string
        groupInstanceId string? 3+ =null
        protocolType string? 5+ =null
        protocolName string? 5+ =null
        assignments []SyncGroupRequestAssignment
          memberId string
          assignment bytes
    """, """
        throttleTimeMs int32 1+
        errorCode int16
        protocolType string? 5+ =null
        protocolName string? 5+ =null
        assignment bytes
    """),
    ("Heartbeat", "4+", """
        groupId string
        generationId int32
        memberId string
        groupInstanceId string? 3+ =null
    """, """
        throttleTimeMs int32 1+
        errorCode int16
    """),
    ("LeaveGroup", "4+", """
        groupId string
        memberId string 0-2
        members []MemberIdentity 3+
          memberId string 3+
          groupInstanceId string? 3+ =null
          reason string? 5+ =null
    """, """
        throttleTimeMs int32 1+
        errorCode int16
        members []MemberResponse 3+
          memberId string 3+
          groupInstanceId string? 3+
          errorCode int16 3+
    """),
    ("OffsetCommit", "8+", """
        groupId string
        generationIdOrMemberEpoch int32 1+ =-1
        memberId string 1+
        groupInstanceId string? 7+ =null
        retentionTimeMs int64 2-4 =-1
        topics []OffsetCommitRequestTopic
          name string
          partitions []OffsetCommitRequestPartition
            partitionIndex int32
            committedOffset int64
            committedLeaderEpoch int32 6+ =-1
            commitTimestamp int64 1 =-1
            committedMetadata string?
    """, """
        throttleTimeMs int32 3+
        topics []OffsetCommitResponseTopic
          name string
          partitions []OffsetCommitResponsePartition
            partitionIndex int32
            errorCode int16
    """),
    ("OffsetFetch", "6+", """
        groupId string 0-7
        topics []OffsetFetchRequestTopic 0-7 null2-7
          name string 0-7
          partitionIndexes []int32 0-7
        groups []OffsetFetchRequestGroup 8+
          groupId string 8+
          memberId string? 9+ =null
          memberEpoch int32 9+ =-1
          topics []OffsetFetchRequestTopics? 8+
            name string 8+
            partitionIndexes []int32 8+
        requireStable bool 7+ =false
    """, """
        throttleTimeMs int32 3+
        topics []OffsetFetchResponseTopic 0-7
          name string 0-7
          partitions []OffsetFetchResponsePartition 0-7
            partitionIndex int32 0-7
            committedOffset int64 0-7
            committedLeaderEpoch int32 5-7 =-1
            metadata string? 0-7
            errorCode int16 0-7
        errorCode int16 2-7 =0
        groups []OffsetFetchResponseGroup 8+
          groupId string 8+
          topics []OffsetFetchResponseTopics 8+
            name string 8+
            partitions []OffsetFetchResponsePartitions 8+
              partitionIndex int32 8+
              committedOffset int64 8+
              committedLeaderEpoch int32 8+ =-1
              metadata string? 8+
              errorCode int16 8+
          errorCode int16 8+ =0
    """),
    ("DescribeConfigs", "4+", """
        resources []DescribeConfigsResource
          resourceType int8
          resourceName string
          configurationKeys []string?
        includeSynonyms bool 1+ =false
        includeDocumentation bool 3+ =false
    """, """
        throttleTimeMs int32
        results []DescribeConfigsResult
          errorCode int16
          errorMessage string?
          resourceType int8
          resourceName string
          configs []DescribeConfigsResourceResult
            name string
            value string?
            readOnly bool
            isDefault bool 0
            configSource int8 1+ =-1
            isSensitive bool
            synonyms []DescribeConfigsSynonym 1+
              name string 1+
              value string? 1+
              source int8 1+
            configType int8 3+ =0
            documentation string? 3+
    """),
    ("DescribeCluster", "0+", """
        includeClusterAuthorizedOperations bool
        endpointType int8 1+ =1
    """, """
        throttleTimeMs int32
        errorCode int16
        errorMessage string? =null
        endpointType int8 1+ =1
        clusterId string
        controllerId int32 =-1
        brokers []DescribeClusterBroker
          brokerId int32
          host string
          port int32
          rack string? =null
        clusterAuthorizedOperations int32 =-2147483648
    """),
]


def _tables(entries: list[tuple[str, str, str, str]]) -> list[tuple[str, str, str, str]]:
    """(name, valid, flexible, fields) of each request and response, the versions from APIS."""
    ranges = {name: f"{lo}-{hi}" for name, lo, hi in APIS.values()}
    out = []
    for api, flexible, request, response in entries:
        out.append((api + "Request", ranges[api], flexible, request))
        out.append((api + "Response", ranges[api], flexible, response))
    return out


MESSAGES: dict[str, Message] = messages(_tables(_READS + WRITES), ProtocolError)
