function(doc) {
  emit(doc._id, Array.from({length: (doc.count || 2)}, function (v, i) { return i * 2; }));
}
