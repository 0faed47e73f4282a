-- A sign-in through a provider under way now lives in the browser's
-- cookie, sealed with the node's key (`web/sign_in_flow.rs`): the routes
-- beginning one are open to anyone, and a table of them could be filled by
-- a caller looping on those routes, locking everyone out of the providers.
DROP TABLE provider_sign_ins;
