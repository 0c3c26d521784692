-- Markers: one row per (consumer, business operation) applied. The primary
-- key is what arbitrates concurrent deliveries of one operation.
CREATE TABLE IF NOT EXISTS {{.Markers}} (
  consumer_name varchar(64)  NOT NULL,
  business_key  varchar(128) NOT NULL,
  event_id      varchar(64)  NOT NULL,
  fields        jsonb        NOT NULL,
  fingerprint   char(64)     NOT NULL,
  outcome       varchar(16)  NOT NULL DEFAULT 'applied',
  created_at    timestamptz  NOT NULL DEFAULT now(),
  PRIMARY KEY (consumer_name, business_key)
);
-- retention purges scan this index
CREATE INDEX IF NOT EXISTS {{.MarkersCreatedIndex}} ON {{.Markers}} (created_at);

-- Conflicts: a business key delivered again with other defining fields.
CREATE TABLE IF NOT EXISTS {{.Conflicts}} (
  id                   bigserial    PRIMARY KEY,
  consumer_name        varchar(64)  NOT NULL,
  business_key         varchar(128) NOT NULL,
  stored_event_id      varchar(64)  NOT NULL,
  stored_fields        jsonb        NOT NULL,
  stored_fingerprint   char(64)     NOT NULL,
  incoming_event_id    varchar(64)  NOT NULL,
  incoming_fields      jsonb        NOT NULL,
  incoming_fingerprint char(64)     NOT NULL,
  occurrences          bigint       NOT NULL DEFAULT 1,
  first_seen           timestamptz  NOT NULL DEFAULT now(),
  last_seen            timestamptz  NOT NULL DEFAULT now(),
  status               varchar(16)  NOT NULL DEFAULT 'OPEN',
  decision             varchar(32)  NULL,
  resolved_by          varchar(128) NULL,
  note                 text         NULL,
  resolved_at          timestamptz  NULL,
  UNIQUE (consumer_name, business_key, incoming_fingerprint)
);
CREATE INDEX IF NOT EXISTS {{.ConflictsStatusIndex}} ON {{.Conflicts}} (status, id);

-- Versions: the newest version applied per (consumer, aggregate), for the
-- order guard.
CREATE TABLE IF NOT EXISTS {{.Versions}} (
  consumer_name varchar(64)  NOT NULL,
  aggregate     varchar(200) NOT NULL,
  version       bigint       NOT NULL,
  PRIMARY KEY (consumer_name, aggregate)
);
