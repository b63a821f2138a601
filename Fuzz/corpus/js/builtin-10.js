function(doc) {
  emit(doc._id, doc.title.repeat((doc.count || 2)));
}
