-- The resource config whose get kept a resource cache (its
-- `ResourceConfig::key`), by which `DELETE .../resources/R/cache` (fly's
-- clear-resource-cache) finds a resource's caches. NULL: an image's cache,
-- or one kept before this column.
ALTER TABLE resource_caches ADD COLUMN config TEXT;
