function(doc) {
  emit(doc._id, (12.345).toPrecision((doc.count || 2)));
}
