-- Each web node's own node timeout (`node_timeout_secs`, ms): another node
-- judges it late by the timeout it declared, not by its own, so nodes whose
-- settings differ never take a beating node's builds over.
ALTER TABLE web_nodes ADD COLUMN timeout_ms BIGINT;

-- A digest of the settings every node should share (placement chains,
-- limits, GC, streaming; no secrets): a node joining with another warns,
-- and `gantry web-nodes` shows each node's.
ALTER TABLE web_nodes ADD COLUMN settings TEXT;
