function(doc) {
  emit(doc._id, new Date(Date.UTC(2020, 0, 1, 12)).getTime());
}
