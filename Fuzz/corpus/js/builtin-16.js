function(doc) {
  emit(doc._id, new Array((doc.count || 2)).fill(0).map(function (x, i) { return i; }));
}
