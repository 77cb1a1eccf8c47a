"""Schema tables of the records of Kafka's internal topics, written from the facts of Kafka's
message definitions (field names, types, versions, nullability, tags, defaults).

``scripts/check_schemas.py`` compares them with the definitions read from Kafka's sources;
checked against Kafka 4.0.0-SNAPSHOT at commit 1eb7644349cb (the commit the Kafka-written
fixtures come from; no difference), the records that commit lacks
(ConsumerGroupRegularExpression*, ClearElrRecord, UnregisterControllerRecord) against the
definitions of the later commits that added them.

Each entry is ``(name, valid versions, flexible versions, field lines)``; the field-line
syntax is ``kafkalog.internal.schema``'s. Field names are those of Kafka's JSON (the
definition's name with its first letter in lower case). A new record type is one more entry
here and one line in the type map that names it.
"""
from __future__ import annotations

from kafkalog.internal.schema import Message, messages

# ----------------------------------------------------------------------------------------------
# __consumer_offsets: the group coordinator's records. The key's int16 version prefix is the
# record type; the value's is the value's schema version.

_GROUP = [
    # -- offsets
    ("OffsetCommitKey", "0+", "none", """
        group string
        topic string
        partition int32
    """),
    ("OffsetCommitValue", "0-4", "4+", """
        offset int64
        leaderEpoch int32 3+ =-1
        metadata string
        commitTimestamp int64
        expireTimestamp int64 1 =-1
    """),
    # -- classic groups
    ("GroupMetadataKey", "0+", "none", """
        group string
    """),
    ("GroupMetadataValue", "0-4", "4+", """
        protocolType string
        generation int32
        protocol string?
        leader string?
        currentStateTimestamp int64 2+ =-1
        members []MemberMetadata
          memberId string
          groupInstanceId string? 3+ =null
          clientId string
          clientHost string
          rebalanceTimeout int32 1+ =-1
          sessionTimeout int32
          subscription bytes
          assignment bytes
    """),
    # -- consumer groups (KIP-848)
    ("ConsumerGroupMetadataKey", "0+", "none", """
        groupId string
    """),
    ("ConsumerGroupMetadataValue", "0", "0+", """
        epoch int32
    """),
    ("ConsumerGroupPartitionMetadataKey", "0+", "none", """
        groupId string
    """),
    ("ConsumerGroupPartitionMetadataValue", "0", "0+", """
        topics []TopicMetadata
          topicId uuid
          topicName string
          numPartitions int32
          partitionMetadata []PartitionMetadata
            partition int32
            racks []string
    """),
    ("ConsumerGroupMemberMetadataKey", "0+", "none", """
        groupId string
        memberId string
    """),
    ("ConsumerGroupMemberMetadataValue", "0", "0+", """
        instanceId string?
        rackId string?
        clientId string
        clientHost string
        subscribedTopicNames []string
        subscribedTopicRegex string?
        rebalanceTimeoutMs int32 =-1
        serverAssignor string?
        classicMemberMetadata ClassicMemberMetadata? tag0 =null
          sessionTimeoutMs int32
          supportedProtocols []ClassicProtocol
            name string
            metadata bytes
    """),
    ("ConsumerGroupTargetAssignmentMetadataKey", "0+", "none", """
        groupId string
    """),
    ("ConsumerGroupTargetAssignmentMetadataValue", "0", "0+", """
        assignmentEpoch int32
    """),
    ("ConsumerGroupTargetAssignmentMemberKey", "0+", "none", """
        groupId string
        memberId string
    """),
    ("ConsumerGroupTargetAssignmentMemberValue", "0", "0+", """
        topicPartitions []TopicPartition
          topicId uuid
          partitions []int32
    """),
    ("ConsumerGroupCurrentMemberAssignmentKey", "0+", "none", """
        groupId string
        memberId string
    """),
    ("ConsumerGroupCurrentMemberAssignmentValue", "0", "0+", """
        memberEpoch int32
        previousMemberEpoch int32
        state int8
        assignedPartitions []TopicPartitions
          topicId uuid
          partitions []int32
        partitionsPendingRevocation []TopicPartitions
    """),
    ("ConsumerGroupRegularExpressionKey", "0+", "none", """
        groupId string
        regularExpression string
    """),
    ("ConsumerGroupRegularExpressionValue", "0", "0+", """
        topics []string
        version int64
        timestamp int64
    """),
    # -- share groups (KIP-932)
    ("ShareGroupPartitionMetadataKey", "0+", "none", """
        groupId string
    """),
    ("ShareGroupPartitionMetadataValue", "0", "0+", """
        topics []TopicMetadata
          topicId uuid
          topicName string
          numPartitions int32
          partitionMetadata []PartitionMetadata
            partition int32
            racks []string
    """),
    ("ShareGroupMemberMetadataKey", "0+", "none", """
        groupId string
        memberId string
    """),
    ("ShareGroupMemberMetadataValue", "0", "0+", """
        rackId string?
        clientId string
        clientHost string
        subscribedTopicNames []string
    """),
    ("ShareGroupMetadataKey", "0+", "none", """
        groupId string
    """),
    ("ShareGroupMetadataValue", "0", "0+", """
        epoch int32
    """),
    ("ShareGroupTargetAssignmentMetadataKey", "0+", "none", """
        groupId string
    """),
    ("ShareGroupTargetAssignmentMetadataValue", "0", "0+", """
        assignmentEpoch int32
    """),
    ("ShareGroupTargetAssignmentMemberKey", "0+", "none", """
        groupId string
        memberId string
    """),
    ("ShareGroupTargetAssignmentMemberValue", "0", "0+", """
        topicPartitions []TopicPartition
          topicId uuid
          partitions []int32
    """),
    ("ShareGroupCurrentMemberAssignmentKey", "0+", "none", """
        groupId string
        memberId string
    """),
    ("ShareGroupCurrentMemberAssignmentValue", "0", "0+", """
        memberEpoch int32
        previousMemberEpoch int32
        state int8
        assignedPartitions []TopicPartitions
          topicId uuid
          partitions []int32
    """),
    ("ShareGroupStatePartitionMetadataKey", "0+", "none", """
        groupId string
    """),
    ("ShareGroupStatePartitionMetadataValue", "0", "0+", """
        initializedTopics []TopicPartitionsInfo
          topicId uuid
          topicName string
          partitions []int32
        deletingTopics []TopicInfo
          topicId uuid
          topicName string
    """),
    # -- the consumer protocol (clients), inside a classic group's member metadata
    ("ConsumerProtocolSubscription", "0-3", "none", """
        topics []string
        userData bytes? =null
        ownedPartitions []TopicPartition 1+
          topic string 1+
          partitions []int32 1+
        generationId int32 2+ =-1
        rackId string? 3+ =null
    """),
    ("ConsumerProtocolAssignment", "0-3", "none", """
        assignedPartitions []TopicPartition
          topic string
          partitions []int32
        userData bytes? =null
    """),
]

# Record type (the key's version) -> (key message, value message).
GROUP_RECORD_TYPES: dict[int, tuple[str, str]] = {
    0: ("OffsetCommitKey", "OffsetCommitValue"),
    1: ("OffsetCommitKey", "OffsetCommitValue"),
    2: ("GroupMetadataKey", "GroupMetadataValue"),
    3: ("ConsumerGroupMetadataKey", "ConsumerGroupMetadataValue"),
    4: ("ConsumerGroupPartitionMetadataKey", "ConsumerGroupPartitionMetadataValue"),
    5: ("ConsumerGroupMemberMetadataKey", "ConsumerGroupMemberMetadataValue"),
    6: ("ConsumerGroupTargetAssignmentMetadataKey", "ConsumerGroupTargetAssignmentMetadataValue"),
    7: ("ConsumerGroupTargetAssignmentMemberKey", "ConsumerGroupTargetAssignmentMemberValue"),
    8: ("ConsumerGroupCurrentMemberAssignmentKey", "ConsumerGroupCurrentMemberAssignmentValue"),
    9: ("ShareGroupPartitionMetadataKey", "ShareGroupPartitionMetadataValue"),
    10: ("ShareGroupMemberMetadataKey", "ShareGroupMemberMetadataValue"),
    11: ("ShareGroupMetadataKey", "ShareGroupMetadataValue"),
    12: ("ShareGroupTargetAssignmentMetadataKey", "ShareGroupTargetAssignmentMetadataValue"),
    13: ("ShareGroupTargetAssignmentMemberKey", "ShareGroupTargetAssignmentMemberValue"),
    14: ("ShareGroupCurrentMemberAssignmentKey", "ShareGroupCurrentMemberAssignmentValue"),
    15: ("ShareGroupStatePartitionMetadataKey", "ShareGroupStatePartitionMetadataValue"),
    16: ("ConsumerGroupRegularExpressionKey", "ConsumerGroupRegularExpressionValue"),
}

# ----------------------------------------------------------------------------------------------
# __transaction_state: the transaction coordinator's records (key version 0 only).

_TRANSACTION = [
    ("TransactionLogKey", "0", "none", """
        transactionalId string
    """),
    ("TransactionLogValue", "0-1", "1+", """
        producerId int64
        previousProducerId int64 1+ tag0 =-1
        nextProducerId int64 1+ tag1 =-1
        producerEpoch int16
        transactionTimeoutMs int32
        transactionStatus int8
        transactionPartitions []PartitionsSchema?
          topic string
          partitionIds []int32
        transactionLastUpdateTimestampMs int64
        transactionStartTimestampMs int64
        clientTransactionVersion int16 1+ tag2 =0
    """),
]

# Kafka's TransactionState ids and names.
TRANSACTION_STATES = {0: "Empty", 1: "Ongoing", 2: "PrepareCommit", 3: "PrepareAbort",
                      4: "CompleteCommit", 5: "CompleteAbort", 6: "Dead",
                      7: "PrepareEpochFence"}

# ----------------------------------------------------------------------------------------------
# __cluster_metadata: KRaft metadata records (every one flexible from version 0).

_METADATA = [
    ("RegisterBrokerRecord", "0-3", "0+", """
        brokerId int32
        isMigratingZkBroker bool 2+
        incarnationId uuid
        brokerEpoch int64
        endPoints []BrokerEndpoint
          name string
          host string
          port uint16
          securityProtocol int16
        features []BrokerFeature
          name string
          minSupportedVersion int16
          maxSupportedVersion int16
        rack string?
        fenced bool =true
        inControlledShutdown bool 1+
        logDirs []uuid 3+ tag0
    """),
    ("UnregisterBrokerRecord", "0", "0+", """
        brokerId int32
        brokerEpoch int64
    """),
    ("TopicRecord", "0", "0+", """
        name string
        topicId uuid
    """),
    ("PartitionRecord", "0-2", "0+", """
        partitionId int32 =-1
        topicId uuid
        replicas []int32
        isr []int32
        removingReplicas []int32
        addingReplicas []int32
        leader int32 =-1
        leaderRecoveryState int8 tag0 =0
        leaderEpoch int32 =-1
        partitionEpoch int32 =-1
        directories []uuid 1+
        eligibleLeaderReplicas []int32? 2+ tag1 =null
        lastKnownElr []int32? 2+ tag2 =null
    """),
    ("ConfigRecord", "0", "0+", """
        resourceType int8
        resourceName string
        name string
        value string?
    """),
    ("PartitionChangeRecord", "0-2", "0+", """
        partitionId int32 =-1
        topicId uuid
        isr []int32? tag0 =null
        leader int32 tag1 =-2
        replicas []int32? tag2 =null
        removingReplicas []int32? tag3 =null
        addingReplicas []int32? tag4 =null
        leaderRecoveryState int8 tag5 =-1
        directories []uuid? 1+ tag8 =null
        eligibleLeaderReplicas []int32? 2+ tag6 =null
        lastKnownElr []int32? 2+ tag7 =null
    """),
    ("FenceBrokerRecord", "0", "0+", """
        id int32
        epoch int64
    """),
    ("UnfenceBrokerRecord", "0", "0+", """
        id int32
        epoch int64
    """),
    ("RemoveTopicRecord", "0", "0+", """
        topicId uuid
    """),
    ("DelegationTokenRecord", "0", "0+", """
        owner string
        requester string
        renewers []string
        issueTimestamp int64
        maxTimestamp int64
        expirationTimestamp int64
        tokenId string
    """),
    ("UserScramCredentialRecord", "0", "0+", """
        name string
        mechanism int8
        salt bytes
        storedKey bytes
        serverKey bytes
        iterations int32
    """),
    ("FeatureLevelRecord", "0", "0+", """
        name string
        featureLevel int16
    """),
    ("ClientQuotaRecord", "0", "0+", """
        entity []EntityData
          entityType string
          entityName string?
        key string
        value float64
        remove bool
    """),
    ("ProducerIdsRecord", "0", "0+", """
        brokerId int32
        brokerEpoch int64 =-1
        nextProducerId int64
    """),
    ("BrokerRegistrationChangeRecord", "0-2", "0+", """
        brokerId int32
        brokerEpoch int64
        fenced int8 tag0
        inControlledShutdown int8 1+ tag1
        logDirs []uuid 2+ tag2
    """),
    ("AccessControlEntryRecord", "0", "0+", """
        id uuid
        resourceType int8
        resourceName string
        patternType int8
        principal string
        host string
        operation int8
        permissionType int8
    """),
    ("RemoveAccessControlEntryRecord", "0", "0+", """
        id uuid
    """),
    ("NoOpRecord", "0", "0+", ""),
    ("ZkMigrationStateRecord", "0", "0+", """
        zkMigrationState int8
    """),
    ("RemoveUserScramCredentialRecord", "0", "0+", """
        name string
        mechanism int8
    """),
    ("BeginTransactionRecord", "0", "0+", """
        name string? tag0 =null
    """),
    ("EndTransactionRecord", "0", "0+", ""),
    ("AbortTransactionRecord", "0", "0+", """
        reason string? tag0 =null
    """),
    ("RemoveDelegationTokenRecord", "0", "0+", """
        tokenId string
    """),
    ("RegisterControllerRecord", "0", "0+", """
        controllerId int32
        incarnationId uuid
        zkMigrationReady bool
        endPoints []ControllerEndpoint
          name string
          host string
          port uint16
          securityProtocol int16
        features []ControllerFeature
          name string
          minSupportedVersion int16
          maxSupportedVersion int16
    """),
    ("ClearElrRecord", "0", "0+", """
        topicName string
    """),
    ("UnregisterControllerRecord", "0", "0+", """
        controllerId int32
    """),
]

# MetadataRecordType id -> message (its enum name is the message name in UPPER_SNAKE_CASE).
METADATA_RECORD_TYPES: dict[int, str] = {
    0: "RegisterBrokerRecord", 1: "UnregisterBrokerRecord", 2: "TopicRecord",
    3: "PartitionRecord", 4: "ConfigRecord", 5: "PartitionChangeRecord",
    7: "FenceBrokerRecord", 8: "UnfenceBrokerRecord", 9: "RemoveTopicRecord",
    10: "DelegationTokenRecord", 11: "UserScramCredentialRecord", 12: "FeatureLevelRecord",
    14: "ClientQuotaRecord", 15: "ProducerIdsRecord", 17: "BrokerRegistrationChangeRecord",
    18: "AccessControlEntryRecord", 19: "RemoveAccessControlEntryRecord", 20: "NoOpRecord",
    21: "ZkMigrationStateRecord", 22: "RemoveUserScramCredentialRecord",
    23: "BeginTransactionRecord", 24: "EndTransactionRecord", 25: "AbortTransactionRecord",
    26: "RemoveDelegationTokenRecord", 27: "RegisterControllerRecord", 28: "ClearElrRecord",
    29: "UnregisterControllerRecord",
}

# ----------------------------------------------------------------------------------------------
# KRaft control records (the value of a record in a control batch; read as version 0).

_CONTROL = [
    ("LeaderChangeMessage", "0-1", "0+", """
        version int16
        leaderId int32
        voters []Voter
          voterId int32
          voterDirectoryId uuid 1+
        grantingVoters []Voter
    """),
    ("SnapshotHeaderRecord", "0", "0+", """
        version int16
        lastContainedLogTimestamp int64
    """),
    ("SnapshotFooterRecord", "0", "0+", """
        version int16
    """),
    ("KRaftVersionRecord", "0", "0+", """
        version int16
        kRaftVersion int16
    """),
    ("VotersRecord", "0", "0+", """
        version int16
        voters []Voter
          voterId int32
          voterDirectoryId uuid
          endpoints []Endpoint
            name string
            host string
            port uint16
          kRaftVersionFeature KRaftVersionFeature
            minSupportedVersion int16
            maxSupportedVersion int16
    """),
]

# ControlRecordType id -> (message, what kafka-dump-log prints before its JSON, or None when
# it prints only "controlType: NAME(id)").
CONTROL_RECORD_TYPES: dict[int, tuple[str, str | None]] = {
    2: ("LeaderChangeMessage", None),
    3: ("SnapshotHeaderRecord", "SnapshotHeader"),
    4: ("SnapshotFooterRecord", "SnapshotFooter"),
    5: ("KRaftVersionRecord", "KRaftVersion"),
    6: ("VotersRecord", "KRaftVoters"),
}

# Messages whose layout may still change without a version bump: those Kafka marks
# ``latestVersionUnstable`` and the share-group records (KIP-932, early access in 4.0). Bytes
# of these that do not read are shown raw with a warning rather than guessed at.
UNSTABLE_MESSAGES = frozenset(
    name for record_type in range(9, 16) for name in GROUP_RECORD_TYPES[record_type])

MESSAGES: dict[str, Message] = messages(_GROUP + _TRANSACTION + _METADATA + _CONTROL)
