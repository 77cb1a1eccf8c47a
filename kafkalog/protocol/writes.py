"""Request and response tables of the write APIs a client may send to ``kafkalog serve``, which
refuses them (it serves data at rest, read-only): decoded so that the answer is the error a
broker gives, and the connection keeps serving. The table syntax and how they are checked:
``kafkalog.protocol.messages``, which holds their versions in ``APIS``.
"""
from __future__ import annotations

WRITES = [
    ("Produce", "9+", """
        transactionalId string? 3+ =null
        acks int16
        timeoutMs int32
        topicData []TopicProduceData
          name string
          partitionData []PartitionProduceData
            index int32
            records records?
    """, """
        responses []TopicProduceResponse
          name string
          partitionResponses []PartitionProduceResponse
            index int32
            errorCode int16
            baseOffset int64
            logAppendTimeMs int64 2+ =-1
            logStartOffset int64 5+ =-1
            recordErrors []BatchIndexAndErrorMessage 8+
              batchIndex int32 8+
              batchIndexErrorMessage string? 8+ =null
            errorMessage string? 8+ =null
            currentLeader LeaderIdAndEpoch 10+ tag0
              leaderId int32 10+ =-1
              leaderEpoch int32 10+ =-1
        throttleTimeMs int32 1+ =0
        nodeEndpoints []NodeEndpoint 10+ tag0
          nodeId int32 10+
          host string 10+
          port int32 10+
          rack string? 10+ =null
    """),
    ("CreateTopics", "5+", """
        topics []CreatableTopic
          name string
          numPartitions int32
          replicationFactor int16
          assignments []CreatableReplicaAssignment
            partitionIndex int32
            brokerIds []int32
          configs []CreatableTopicConfig
            name string
            value string?
        timeoutMs int32 =60000
        validateOnly bool 1+ =false
    """, """
        throttleTimeMs int32 2+
        topics []CreatableTopicResult
          name string
          topicId uuid 7+
          errorCode int16
          errorMessage string? 1+
          topicConfigErrorCode int16 5+ tag0
          numPartitions int32 5+ =-1
          replicationFactor int16 5+ =-1
          configs []CreatableTopicConfigs? 5+
            name string 5+
            value string? 5+
            readOnly bool 5+
            configSource int8 5+ =-1
            isSensitive bool 5+
    """),
    ("DeleteTopics", "4+", """
        topics []DeleteTopicState 6+
          name string? 6+ =null
          topicId uuid 6+
        topicNames []string 0-5
        timeoutMs int32
    """, """
        throttleTimeMs int32 1+
        responses []DeletableTopicResult
          name string null6+
          topicId uuid 6+
          errorCode int16
          errorMessage string? 5+ =null
    """),
    ("DeleteRecords", "2+", """
        topics []DeleteRecordsTopic
          name string
          partitions []DeleteRecordsPartition
            partitionIndex int32
            offset int64
        timeoutMs int32
    """, """
        throttleTimeMs int32
        topics []DeleteRecordsTopicResult
          name string
          partitions []DeleteRecordsPartitionResult
            partitionIndex int32
            lowWatermark int64
            errorCode int16
    """),
    ("InitProducerId", "2+", """
        transactionalId string?
        transactionTimeoutMs int32
        producerId int64 3+ =-1
        producerEpoch int16 3+ =-1
    """, """
        throttleTimeMs int32
        errorCode int16
        producerId int64 =-1
        producerEpoch int16
    """),
]
