function(doc) {
  emit(doc._id, new Date(2026, (doc.count || 2), 27).toISOString());
}
