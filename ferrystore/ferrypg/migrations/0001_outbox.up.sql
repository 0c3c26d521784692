-- The outbox table. Its first columns and the pending index are the seed
-- schema's outbox_event; every added column has a default.
CREATE TABLE IF NOT EXISTS {{.Table}} (
  event_id       varchar(64)  NOT NULL PRIMARY KEY,
  aggregate_type varchar(64)  NOT NULL DEFAULT '',
  aggregate_id   varchar(128) NOT NULL,
  aggregate_seq  bigint       NOT NULL DEFAULT 0,
  event_type     varchar(64)  NOT NULL,
  payload        json         NOT NULL,
  headers        json         NULL,
  destination    varchar(255) NOT NULL DEFAULT '',
  exchange       varchar(255) NOT NULL DEFAULT '',
  status         varchar(16)  NOT NULL DEFAULT 'NEW',
  attempts       integer      NOT NULL DEFAULT 0,
  available_at   timestamptz  NOT NULL DEFAULT now(),
  lease_token    varchar(64)  NULL,
  locked_until   timestamptz  NULL,
  created_at     timestamptz  NOT NULL DEFAULT now(),
  sent_at        timestamptz  NULL,
  last_error     text         NULL
);
-- claims, sweeps and purges scan this index by status
CREATE INDEX IF NOT EXISTS {{.PendingIndex}} ON {{.Table}} (status, available_at, event_id);
-- ordered claims look up an aggregate's earlier events here
CREATE INDEX IF NOT EXISTS {{.AggregateIndex}} ON {{.Table}} (aggregate_type, aggregate_id, aggregate_seq);
-- The last sequence number given to each aggregate. Enqueue increments it in
-- the caller's transaction, which serialises enqueues of one aggregate.
CREATE TABLE IF NOT EXISTS {{.SeqTable}} (
  aggregate_type varchar(64)  NOT NULL,
  aggregate_id   varchar(128) NOT NULL,
  last_seq       bigint       NOT NULL,
  PRIMARY KEY (aggregate_type, aggregate_id)
);
