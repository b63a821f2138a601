// SwiftCouch: a Swift client for Apache CouchDB and IBM Cloudant.
