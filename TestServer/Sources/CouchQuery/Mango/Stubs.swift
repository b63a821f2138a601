enum MangoIndexes {
    static func create(requestBody: JSON, designDocuments: [JSON], partitionedDatabase: Bool)
        throws(MangoError) -> MangoIndexCreation
    {
        throw MangoError(status: 501, error: "not_implemented", reason: "Mango indexes are not implemented yet")
    }
    static func list(designDocuments: [JSON]) -> JSON {
        ["total_rows": 1, "indexes": [["ddoc": nil, "name": "_all_docs", "type": "special",
                                        "def": ["fields": [["_id": "asc"]]]]]]
    }
    static func delete(designDocuments: [JSON], designDocumentID: String, type: String, name: String)
        throws(MangoError) -> MangoIndexDeletion
    {
        throw MangoError(status: 404, error: "not_found", reason: "Index not found")
    }
}

enum MangoFind {
    static func find(requestBody: JSON, databaseName: String, designDocuments: [JSON], documents: [MangoDocument],
                     partition: String?) throws(MangoError) -> JSON
    {
        throw MangoError(status: 501, error: "not_implemented", reason: "_find is not implemented yet")
    }
    static func explain(requestBody: JSON, databaseName: String, designDocuments: [JSON], partition: String?)
        throws(MangoError) -> JSON
    {
        throw MangoError(status: 501, error: "not_implemented", reason: "_explain is not implemented yet")
    }
}
