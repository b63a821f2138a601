function(doc) {
  emit(doc._id, JSON.stringify({a: [1, {b: doc.nested}]}, null, 2));
}
