from ddpsim.intervals import union_length


def test_overlaps_count_once_and_gaps_not_at_all():
    # [0,2] and [1,3] cover 3; [5,6] adds 1; [5.5,5.7] inside it adds nothing; order does not matter
    assert union_length([(5.5, 5.7), (1.0, 3.0), (5.0, 6.0), (0.0, 2.0)]) == 4.0
    assert union_length([]) == 0.0
    assert union_length([(1.0, 2.0), (2.0, 3.0)]) == 2.0  # touching intervals
